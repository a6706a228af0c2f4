"""Answering a question: the loop over a job's questions and what one question goes through.

`run` takes each question through memory, the reader (`reader`: prompt composition and the read), the re-read
rules (`rules`) and the judge, and journals each outcome; `study_instructions` reads the reference study's own
instruction file; `steps` tabulates a multi-step design's steps.

May import `lme.reporting` (measures), `lme.judge`, `lme.memory`, `lme.retrieval`, `lme.models`, `lme.data` and
`lme.util`.
"""
