"""Loaded by every Python process started with this folder on PYTHONPATH (`scripts/bench_tricks.py --study`):
switches the tricks named in BENCH_TRICKS_OFF off in a whole study (its process and the helper's), without
changing lme's code, and with BENCH_TRICKS_LOG=FOLDER writes there, at exit, the objects each freeze moved and
the collector's time per generation (`gc.callbacks`). Measurement only: nothing of lme imports it.
"""

import os
import sys

OFF = set(filter(None, os.environ.get("BENCH_TRICKS_OFF", "").split(",")))
LOG = os.environ.get("BENCH_TRICKS_LOG")

if LOG:
    import atexit
    import gc
    import json
    import time

    import lme.util.heap as _heap

    _generations = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}  # generation -> [collections, seconds]
    _began = [0.0]
    _freezes: dict = {}

    def _collecting(phase, info):
        if phase == "start":
            _began[0] = time.perf_counter()
        else:
            entry = _generations[info["generation"]]
            entry[0] += 1
            entry[1] += time.perf_counter() - _began[0]

    gc.callbacks.append(_collecting)
    _original_freeze = _heap.freeze_long_lived

    def _logged_freeze(what, *, collect_young=True):
        before = gc.get_freeze_count()
        done = _original_freeze(what, collect_young=collect_young)
        _freezes[what] = gc.get_freeze_count() - before
        return done

    _heap.freeze_long_lived = _logged_freeze

    def _dump():
        with open(os.path.join(LOG, f"{os.getpid()}.json"), "w", encoding="utf-8") as out:
            json.dump({"argv": sys.argv[:3], "freezes": _freezes, "generations": _generations}, out)

    atexit.register(_dump)

if OFF:
    import contextlib
    import importlib.abc
    import importlib.machinery

    import lme.util.heap as heap

    _pause = heap.collection_paused
    _freeze = heap.freeze_long_lived
    _PAUSED_BY = {"lme.data.load": "parse_pause", "lme.data.dataset": "file_freeze",
                  "lme.models.litellm_loader": "litellm_freeze"}
    _FROZEN_AS = {"file": "file_freeze", "litellm": "litellm_freeze", "job": "job_freeze"}

    def collection_paused():
        caller = sys._getframe(1).f_globals.get("__name__")
        return contextlib.nullcontext() if _PAUSED_BY.get(caller) in OFF else _pause()

    def freeze_long_lived(what, *, collect_young=True):
        if _FROZEN_AS.get(what) in OFF:
            return False
        return _freeze(what, collect_young=collect_young)

    heap.collection_paused, heap.freeze_long_lived = collection_paused, freeze_long_lived

    def _switch_off(module):
        name = module.__name__
        if name == "lme.data.dataset":
            prefetch = module.prefetch_dataset
            if "held_parse" in OFF:
                module.prefetch_dataset = lambda spec, hold_parse=False: prefetch(spec, False)
            if "prefetch" in OFF:
                module.prefetch_dataset = lambda spec, hold_parse=False: None
        elif name == "lme.models.litellm_loader" and "warm_call" in OFF:
            module.warm_call_path = lambda: False
        elif name == "lme.study.job" and "warm_tokenizers" in OFF:
            module.warm_tokenizers = lambda design: None
        elif name == "lme.tracking.traces" and "helper_warm" in OFF:
            module.start_helper = lambda settings: None
        elif name == "lme.models.cache" and "memo_key" in OFF:
            module._MESSAGES.max_chars = 0
        elif name == "lme.answer.reader" and "memo_payload" in OFF:
            module._PAYLOADS.max_chars = 0
        elif name == "lme.tracking.helper" and "helper_nice" in OFF:
            module.yield_cpu = lambda: None

    _WATCHED = {"lme.data.dataset", "lme.models.litellm_loader", "lme.study.job", "lme.tracking.traces",
                "lme.models.cache", "lme.answer.reader", "lme.tracking.helper"}

    class _SwitchOff(importlib.abc.MetaPathFinder):
        """Runs `_switch_off` on a watched module as soon as it is executed, before anyone imports from it."""

        def find_spec(self, fullname, path, target=None):
            if fullname not in _WATCHED:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None:
                return spec
            execute = spec.loader.exec_module

            def exec_module(module, _execute=execute):
                _execute(module)
                _switch_off(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _SwitchOff())
