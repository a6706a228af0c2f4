"""Short judge templates for tests that build an offline (lexical) judge directly, one per question type."""

OFFLINE_TEMPLATES = {
    "abstention": "Question: {}\n\nExplanation: {}\n\nModel Response: {}\n\nDeclines?",
    "ssu_ssa_multisession": "Question: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nCorrect?",
    "temporal_reasoning": "Question: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nCorrect?",
    "knowledge_update": "Question: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nCorrect?",
    "single_session_preference": "Question: {}\n\nRubric: {}\n\nModel Response: {}\n\nCorrect?",
}
