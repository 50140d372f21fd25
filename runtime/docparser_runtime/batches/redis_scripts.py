"""The batch store's Lua scripts: every change that touches more than one key is one
script, so replicas (and the reaper) never see half of it. Keys a script derives from a
batch id are built from ``ARGV`` prefix + id (one Redis, not a cluster: as the job store)."""

# KEYS: batch, by_owner, active_by, active. ARGV: limit, id, created_at, field, value, ...
CREATE = """
local limit = tonumber(ARGV[1])
if limit > 0 and redis.call('SCARD', KEYS[3]) >= limit then return 0 end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[2])
return 1
"""

# KEYS: batch, active_by, active, gc. ARGV: from (comma list), to, stamp field, now,
# terminal (0|1), gc_at, id, field, value, ...  Returns 1 when it moved.
TRANSITION = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 0 end
local allowed = false
for s in string.gmatch(ARGV[1], '[^,]+') do if s == status then allowed = true end end
if not allowed then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], ARGV[3], ARGV[4])
for i = 8, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if ARGV[5] == '1' then
  redis.call('SREM', KEYS[2], ARGV[7])
  redis.call('SREM', KEYS[3], ARGV[7])
  redis.call('ZADD', KEYS[4], ARGV[6], 'batch:' .. ARGV[7])
end
return 1
"""

# KEYS: batch, queue. ARGV: id, total, now. validating -> in_progress, every line queued.
START = """
if redis.call('HGET', KEYS[1], 'status') ~= 'validating' then return 0 end
local total = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'status', 'in_progress', 'in_progress_at', ARGV[3], 'total', total)
local items = {}
for i = 0, total - 1 do
  items[#items + 1] = ARGV[1] .. ':' .. i
  if #items == 1000 then redis.call('RPUSH', KEYS[2], unpack(items)); items = {} end
end
if #items > 0 then redis.call('RPUSH', KEYS[2], unpack(items)) end
return 1
"""

# KEYS: queue, held, workers, attempt. ARGV: worker, prefix, max lines to look at, the
# attempt key's lifetime (ms). The oldest line of a batch still in progress; lines of
# cancelled or expired batches are dropped on the way (a cancel costs nothing per queued line).
# The attempt key makes the claim idempotent: redis-py sends a call again by itself when its
# connection dropped, and a claim that ran but whose reply was lost would otherwise take a
# second line and leave the first held under the live worker's lease, never run.
CLAIM = """
local again = redis.call('GET', KEYS[4])
if again then return again end
for _ = 1, tonumber(ARGV[3]) do
  local item = redis.call('LPOP', KEYS[1])
  if not item then return false end
  local id = string.match(item, '^(.*):%d+$')
  if redis.call('HGET', ARGV[2] .. 'batch:' .. id, 'status') == 'in_progress' then
    redis.call('SADD', KEYS[2], item)
    redis.call('SADD', KEYS[3], ARGV[1])
    redis.call('INCR', ARGV[2] .. 'inflight:' .. id)
    redis.call('SET', KEYS[4], item, 'PX', ARGV[4])
    return item
  end
end
return false
"""

# KEYS: held. ARGV: item, prefix. The line is done (recorded or dropped).
ACK = """
if redis.call('SREM', KEYS[1], ARGV[1]) == 1 then
  local id = string.match(ARGV[1], '^(.*):%d+$')
  redis.call('DECR', ARGV[2] .. 'inflight:' .. id)
end
return 1
"""

# KEYS: results, counts, batch. ARGV: index, value, counter. Exactly once per (batch, line),
# and only while the batch runs (a late duplicate of a finished batch changes nothing).
RECORD = """
local status = redis.call('HGET', KEYS[3], 'status')
if status ~= 'in_progress' and status ~= 'cancelling' then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
  return 1
end
return 0
"""

# KEYS: workers, queue. ARGV: prefix, worker ('' = every worker whose lease expired).
# Their held lines go back to the head of the queue.
REQUEUE = """
local moved = 0
for _, w in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if (ARGV[2] == '' and redis.call('EXISTS', ARGV[1] .. 'lease:' .. w) == 0) or w == ARGV[2] then
    local held = ARGV[1] .. 'held:' .. w
    for _, item in ipairs(redis.call('SMEMBERS', held)) do
      redis.call('LPUSH', KEYS[2], item)
      local id = string.match(item, '^(.*):%d+$')
      redis.call('DECR', ARGV[1] .. 'inflight:' .. id)
      moved = moved + 1
    end
    redis.call('DEL', held)
    redis.call('SREM', KEYS[1], w)
  end
end
return moved
"""

# KEYS: lock. ARGV: holder, ttl ms. Returns 1 when the holder has it now: taken free, or
# already its own (refreshed). Why its own counts: a Redis outage between the coordinator's
# lock and its unlock left the lock (kept by the AOF) for its whole TTL, and the batch, every
# line done, waited that long to finish; only one coordinator loop runs per holder.
LOCK = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: lock. ARGV: holder. Deletes the lock only if it is still the holder's (after its TTL
# another replica may hold it).
UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
