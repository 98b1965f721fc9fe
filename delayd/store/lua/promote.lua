-- promote: the bucket's tick. Four jobs, in this order, each in a file of the lib: due tasks to the ready
-- lists (_due.lua), held tasks their limit lets start (_release.lua), lapsed leases back to run again
-- (_reap.lua), finished-task indexes trimmed to the retention (_trim.lua); then the ready messages, and the
-- keys the next call will need (_tick.lua: a call touches no key it did not declare).
-- KEYS[1]    delayed        P{N}:delayed
-- KEYS[2]    leases         P{N}:leases
-- KEYS[3]    ready_3        P{N}:ready:3
-- KEYS[4]    ready_2        P{N}:ready:2
-- KEYS[5]    ready_1        P{N}:ready:1
-- KEYS[6]    done_ok        P{N}:done:ok
-- KEYS[7]    done_failed    P{N}:done:failed
-- KEYS[8]    done_deleted   P{N}:done:deleted
-- KEYS[9]    quarantine_key P{N}:quarantine
-- KEYS[10]   counts_key     P{N}:counts
-- KEYS[11]   totals_key     P{N}:totals
-- KEYS[12]   paused         P{N}:paused
-- KEYS[13]   ready_u3       P{N}:ready:u3
-- KEYS[14]   ready_u2       P{N}:ready:u2
-- KEYS[15]   ready_u1       P{N}:ready:u1
-- KEYS[16]   limited        P{N}:limited
-- KEYS[17]   window         P{N}:w:<n>        the run-event windows of the caller's clock (flush_stats)
-- KEYS[18]   next_window    P{N}:w:<n+1>
-- KEYS[19]   minute         P{N}:w:m:<m>
-- KEYS[20]   next_minute    P{N}:w:m:<m+1>
-- KEYS[21]   corrupt        P{N}:corrupt      (declared only: set_aside names it)
-- KEYS[22..] learned        *                 the keys the previous call's reply named, then the records of
--                                             the members wake messages named
-- ARGV[1]    prefix         the task-key prefix P{N}:t:
-- ARGV[2]    batch          the most entries a job takes of one index in one call
-- ARGV[3]    retention      ms
-- ARGV[4]    ready_channel  Pready
-- ARGV[5]    bucket         N
-- ARGV[6]    limits_prefix  P{limits}:, or '' on Redis Cluster
-- Reply: {moved, reaped, next_due, next_lease, clock_us, full, learned...}
--   moved: tasks made ready (due or released); reaped: lapsed leases made ready again;
--   next_due: ms, the earlier of the heads of `delayed` and of `limited`, or -1; next_lease: ms, the
--   earliest lease expiry, or -1; clock_us: Redis's clock (µs); full: 1 if a batch was full or the call was
--   cut for want of keys (call again at once), else 0; learned: the keys the next call is to declare.
local delayed, leases, ready_3, ready_2, ready_1 = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local done_ok, done_failed, done_deleted, quarantine_key = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local counts_key, totals_key, paused = KEYS[10], KEYS[11], KEYS[12]
local ready_u3, ready_u2, ready_u1, limited = KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local window, next_window, minute, next_minute = KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local prefix, batch, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ready_channel, bucket, limits_prefix = ARGV[4], ARGV[5], ARGV[6]

local clock = now_us()
local now = math.floor(clock / 1000)
local tick = {
  now = now, clock = clock, prefix = prefix, batch = batch, retention = retention, bucket = bucket,
  limits_prefix = limits_prefix, delayed = delayed, leases = leases, paused = paused, limited = limited,
  -- The batch as text once: a Lua number given to redis.call is formatted per argument (%.17g).
  batch_text = string.format('%d', batch),
  lists = {['3'] = ready_3, ['2'] = ready_2, ['1'] = ready_1},
  url_lists = {['3'] = ready_u3, ['2'] = ready_u2, ['1'] = ready_u1},
  quarantine_to = {failed = done_failed, quarantine = quarantine_key, now = now, retention = retention},
  moved = 0, reaped = 0, kinds = {}, cut = false, asked = {}, named = {}, pauses = {},
}
local due_found = move_due(tick)
local release_again = release_held(tick)
local leases_found = reap_lapsed(tick)
trim_finished(tick, done_ok, done_failed, done_deleted, quarantine_key)
flush_stats(counts_key, totals_key, window, next_window, minute, next_minute, now)
-- `N` for call/push tasks, `uN` for URL tasks: a queue process claims only the kind announced.
for kind in pairs(tick.kinds) do redis.call('PUBLISH', ready_channel, kind .. bucket) end
local next_due, next_lease = look_ahead(tick)
local full = (due_found == batch or leases_found == batch or release_again or tick.cut) and 1 or 0
return {tick.moved, tick.reaped, next_due, next_lease, clock, full, unpack(tick.asked)}
