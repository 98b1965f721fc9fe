"""The queue process: `loop` (QueueWorker: the main thread's loop, its events and its one round
trip to Redis per turn), `claims` (what to claim, from which bucket; lease renewals), `outcomes`
(what a run's end does to its task, the finishes sent), `pool` (the handler threads), `state`
(a claimed task in hand, and what the others share)."""
