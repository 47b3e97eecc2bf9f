"""Python scenarios run in a child process (Airflow's ``dag.test()`` needs its own
configuration and JVM), and what they found, read back from a file.

A scenario calls ``RESULT(value)``; the value comes back as JSON through a file, not
stdout: Airflow, py4j and Spark write to the child's stdout from threads of their own,
and once another writer's text landed on the result's line (``JSONDecodeError: Extra
data``)."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

_PRELUDE = '''
def RESULT(value):
    import json, os
    with open(os.environ["SCENARIO_RESULT_FILE"], "w") as f:
        json.dump(value, f)


def OUTCOME(fn):
    """``{"ok": fn()}``, or the mzflow error it raised: type, SQLSTATE, message, hint."""
    import mzflow
    try:
        return {"ok": fn()}
    except mzflow.Error as e:
        return {"type": type(e).__name__, "code": e.code, "message": e.message,
                "hint": e.hint}
'''


def run_scenario(code: str, *args: str, env: dict[str, str], cwd: Path,
                 timeout: float) -> tuple[object, str, int]:
    """Run ``code`` with ``args`` as its ``sys.argv[1:]`` (``RESULT`` and ``OUTCOME``
    defined for it): (its RESULT, or None when
    it called none, its stdout and stderr, its exit code)."""
    with tempfile.TemporaryDirectory(dir=cwd) as tmp:
        path = Path(tmp) / "result.json"
        proc = subprocess.run([sys.executable, "-c", _PRELUDE + code, *args],
                              capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env={**env, "SCENARIO_RESULT_FILE": str(path)})
        result = json.loads(path.read_text()) if path.exists() else None
    return result, proc.stdout + proc.stderr, proc.returncode


def expect_result(code: str, *args: str, env: dict[str, str], cwd: Path,
                  timeout: float) -> tuple[object, str]:
    """``run_scenario`` that must exit 0 with a RESULT: (the result, the log)."""
    result, log, rc = run_scenario(code, *args, env=env, cwd=cwd, timeout=timeout)
    assert rc == 0 and result is not None, log[-8000:]
    return result, log



def in_process_spark(code: str, home: Path, *, timeout: float = 900,
                     **env: str) -> dict[str, object]:
    """``code``'s RESULT (a dict), run with ``home`` as its mzflow home and its clusters'
    ticks on its own in-process Spark (a JVM of its own), plus ``env``."""
    import os

    result, _ = expect_result(code, env={**os.environ, "MZFLOW_HOME": str(home / "home"),
                                         "MZFLOW_CLUSTER_SPARK": "in-process", **env},
                              cwd=home, timeout=timeout)
    assert isinstance(result, dict), result
    return result
