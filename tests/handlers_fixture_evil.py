"""Must never run when only `handlers_fixture` is allowed (a prefix, not a module)."""
IMPORTED = True


def touch(task):
    with open(task.params["path"], "a") as fh:
        fh.write("evil\n")
    return "success"
