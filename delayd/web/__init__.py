"""The dashboard: `delayd web`, or the master's `delayd: web` child when web_port is set.

app.py (routes, auth rules), pages.py (the HTML pages), auth.py (token, session cookie, CSRF), views.py (what pages
and the API show), display.py (showing stored data safely: names, times, JSON), charts.py
(the last hour per minute), actions.py (buttons and POSTs), producers.py (the HTTP producer API:
POST /api/tasks, DELETE /api/tasks/TOPIC/ID), outage.py (what a 503 says, and logs), bodies.py (request
bodies within a limit),
command.py (the verb), child.py (the supervised child). Templates and static files ship as package data. Every read and
action goes through an AsyncClient (its pages' reads: delayd.client.reads, browse.py,
schedules.py, series.py); nothing here imports delayd.store or redis (.importlinter).
"""
