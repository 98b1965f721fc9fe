"""The handler of the stored-data fuzzer (tests/store/test_fuzz_stored.py); tests/ is on the daemon's PYTHONPATH."""
import time

from delayd.examples import _redis


def outcome(task):
    """Sleep params['sleep'] s, RPUSH "<key>:<runs>" to params['list'], then answer params['outcome']:
    'success', 'fail', or 'retry' (a retry on the first run, a success on the next)."""
    time.sleep(float(task.params.get("sleep", 0)))
    _redis(str(task.params["redis"])).rpush(task.params["list"], f"{task.key}:{task.runs}")
    wanted = task.params.get("outcome", "success")
    if wanted == "retry":
        return "retry" if task.runs == 1 else "success"
    return wanted
