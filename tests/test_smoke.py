"""The package imports and a task makes a round trip through a real Redis."""
from delayd import Client


def test_add_get_round_trip(client: Client):
    assert client.add("order:cancel", 42, call="shop.tasks:cancel", delay=1800) is True
    task = client.get("order:cancel", 42)
    assert task.key == "order:cancel:42" and task.status == "delayed"
    assert 1799 < task.due_at - task.created_at < 1801
