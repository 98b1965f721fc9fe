-- host_switch: disable or enable URL hosts (delayd hosts disable|enable), counting the event.
-- KEYS[1]      off        P{hosts}:off             hash origin -> when disabled (ms)
-- KEYS[2]      events     P{hosts}:events          hash disabled|enabled -> times
-- KEYS[3]      corrupt    P{hosts}:corrupt         (declared only: set_aside names it)
-- KEYS[3 + o]  health     P{hosts}:h:<origin>      to enable, origin o's health hash
-- ARGV[1]      action     'disable' or 'enable'
-- ARGV[1 + o]  origin     origin o (scheme://host:port)
-- Reply: changed, how many origins changed
-- Disabling flags the origins: from then on claim.lua sets their due URL tasks aside (runs in flight
-- finish). Enabling unflags them, and forgets since when they had been failing (`P{hosts}:h:<origin>`),
-- so that url_disable_after counts afresh; Store.enable_steps then resumes the topics holding tasks set aside.
-- An origin already in the asked state is left as it is and not counted. O(origins).
local off, events = KEYS[1], KEYS[2]
local health = KEYS  -- origin o's health hash: health[3 + o]
local action = ARGV[1]
local origins = ARGV  -- origin o: origins[1 + o]

expect('hash', off, events)
local changed = 0
for o = 1, #origins - 1 do
  if action == 'disable' then
    changed = changed + redis.call('HSETNX', off, origins[1 + o], now_ms())
  else
    changed = changed + redis.call('HDEL', off, origins[1 + o])
    redis.pcall('HDEL', health[3 + o], 'failing_since')
  end
end
if changed > 0 then redis.call('HINCRBY', events, action .. 'd', changed) end
return changed
