-- host_switch: disable or enable URL hosts (delayd hosts disable|enable), counting the event.
-- KEYS: off (hash origin -> when disabled, ms), events (hash disabled|enabled -> times), corrupt
--       (set_aside), then to enable
--       each origin's health hash (`P{hosts}:h:<origin>`)
-- ARGV: 'disable' or 'enable', then the origins (scheme://host:port)
-- Disabling flags the origins: from then on claim.lua sets their due URL tasks aside (runs in flight
-- finish). Enabling unflags them, and forgets since when they had been failing (`P{hosts}:h:<origin>`),
-- so that url_disable_after counts afresh; Store.enable_steps then resumes the topics holding tasks set aside.
-- An origin already in the asked state is left as it is and not counted. O(origins).
-- Returns how many origins changed.
local action = ARGV[1]
expect('hash', KEYS[1], KEYS[2])
local changed = 0
for i = 2, #ARGV do
  if action == 'disable' then
    changed = changed + redis.call('HSETNX', KEYS[1], ARGV[i], now_ms())
  else
    changed = changed + redis.call('HDEL', KEYS[1], ARGV[i])
    redis.pcall('HDEL', KEYS[i + 2], 'failing_since')
  end
end
if changed > 0 then redis.call('HINCRBY', KEYS[2], action .. 'd', changed) end
return changed
