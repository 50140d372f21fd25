"""Lua scripts of the Redis job store: each multi-key state change runs atomically.

Kept apart from ``redis_store.py`` so the store reads as plain Python; the key layout
is described there. ``KEYS``/``ARGV`` are listed at the top of every script.
"""

# A job's owner (API key id) is recorded in a set of its queued jobs while it is queued,
# so the per-key quota is one SCARD inside the script that enqueues. Every script that
# moves a job in or out of "queued" keeps that set in step (ARGV names the key prefix).
_OWNER_QUEUED = """
local function owner_set(prefix, job_key)
  local owner = redis.call('HGET', job_key, 'owner')
  if owner and owner ~= '' then return prefix .. owner end
  return nil
end
"""

# Each revision (track) has its own queue, ``<prefix>queue:<revision>`` (``<prefix>queue``
# without a revision), so a job runs on the revision that accepted it. Scripts that put a
# job back find its queue from the job's ``revision`` field (ARGV names the base key).
_QUEUE_OF = """
local function queue_of(base, job_key)
  local rev = redis.call('HGET', job_key, 'revision')
  if rev and rev ~= '' then return base .. ':' .. rev end
  return base
end
"""

SUBMIT = """
-- KEYS: job, input, queue, owner queued set, [idem]
-- ARGV: id, fingerprint, ttl, job prefix, input, max queued (0 = none),
--       max queued for this owner (0 = none), fields...
-- -> {'created'|'existing'|'conflict', id} or {'full'|'quota', limit}
if #KEYS == 5 then
  local existing = redis.call('GET', KEYS[5])
  if existing then
    local sep = string.find(existing, ' ', 1, true)
    local fp, id = string.sub(existing, 1, sep - 1), string.sub(existing, sep + 1)
    if fp ~= ARGV[2] then return {'conflict', id} end
    if redis.call('EXISTS', ARGV[4] .. id) == 1 then return {'existing', id} end
  end
end
local max_queued, max_owner = tonumber(ARGV[6]), tonumber(ARGV[7])
if max_queued > 0 and redis.call('LLEN', KEYS[3]) >= max_queued then
  return {'full', ARGV[6]}
end
if max_owner > 0 and redis.call('SCARD', KEYS[4]) >= max_owner then
  -- Self-healing: drop ids that are no longer queued (expired or edited by hand), so a
  -- stale entry can never lock a key out. Bounded: the set holds about max_owner ids.
  for _, id in ipairs(redis.call('SMEMBERS', KEYS[4])) do
    if redis.call('HGET', ARGV[4] .. id, 'status') ~= 'queued' then
      redis.call('SREM', KEYS[4], id)
    end
  end
  if redis.call('SCARD', KEYS[4]) >= max_owner then return {'quota', ARGV[7]} end
end
if #KEYS == 5 then
  redis.call('SET', KEYS[5], ARGV[2] .. ' ' .. ARGV[1], 'EX', ARGV[3])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('SET', KEYS[2], ARGV[5])
redis.call('LPUSH', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[1], 'owner') ~= '' then redis.call('SADD', KEYS[4], ARGV[1]) end
return {'created', ARGV[1]}
"""

START = (
    _OWNER_QUEUED
    + """
-- KEYS: job, processing; ARGV: id, worker, now, owner set prefix
if redis.call('HGET', KEYS[1], 'status') == 'queued' then
  local owned = owner_set(ARGV[4], KEYS[1])
  if owned then redis.call('SREM', owned, ARGV[1]) end
  redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[2], 'updated_at', ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'attempts', 1)
  return 1
end
redis.call('LREM', KEYS[2], 0, ARGV[1])
return 0
"""
)

CANCEL = (
    _OWNER_QUEUED
    + _QUEUE_OF
    + """
-- KEYS: job, input; ARGV: id, now, ttl, owner set prefix, queue base
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 'missing' end
if st == 'queued' then
  local owned = owner_set(ARGV[4], KEYS[1])
  if owned then redis.call('SREM', owned, ARGV[1]) end
  redis.call('LREM', queue_of(ARGV[5], KEYS[1]), 0, ARGV[1])
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'updated_at', ARGV[2], 'worker', '')
  redis.call('DEL', KEYS[2])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return 'cancelled'
end
if st == 'running' then
  redis.call('HSET', KEYS[1], 'cancel_requested', '1', 'updated_at', ARGV[2])
  return 'running'
end
return st
"""
)

PROGRESS = """
-- KEYS: job; ARGV: worker, now, pages_done, pages_total -> 1 = stop, 0 = go on
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 1 end
if redis.call('HGET', KEYS[1], 'worker') ~= ARGV[1] then return 1 end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[2], 'pages_done', ARGV[3], 'pages_total', ARGV[4])
if redis.call('HGET', KEYS[1], 'cancel_requested') == '1' then return 1 end
return 0
"""

FINISH = """
-- KEYS: job, processing, input, [idem]; ARGV: id, worker, now, ttl, status, result, error
redis.call('LREM', KEYS[2], 0, ARGV[1])
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
if redis.call('HGET', KEYS[1], 'worker') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[5], 'updated_at', ARGV[3], 'result', ARGV[6],
           'error', ARGV[7], 'worker', '')
redis.call('DEL', KEYS[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if #KEYS == 4 then redis.call('EXPIRE', KEYS[4], ARGV[4]) end
return 1
"""

RELEASE = (
    _OWNER_QUEUED
    + _QUEUE_OF
    + """
-- KEYS: job, processing; ARGV: id, worker, now, owner set prefix, queue base
redis.call('LREM', KEYS[2], 0, ARGV[1])
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
if redis.call('HGET', KEYS[1], 'worker') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'queued', 'worker', '', 'pages_done', '0',
           'updated_at', ARGV[3])
redis.call('RPUSH', queue_of(ARGV[5], KEYS[1]), ARGV[1])
local owned = owner_set(ARGV[4], KEYS[1])
if owned then redis.call('SADD', owned, ARGV[1]) end
return 1
"""
)

REQUEUE_DEAD = (
    _OWNER_QUEUED
    + _QUEUE_OF
    + """
-- KEYS: lease, processing, workers
-- ARGV: worker, job prefix, input prefix, now, ttl, max attempts, error json,
--       owner set prefix, queue base
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local n = 0
while true do
  local id = redis.call('RPOP', KEYS[2])
  if not id then break end
  local jk = ARGV[2] .. id
  local st = redis.call('HGET', jk, 'status')
  local running_here = st == 'running' and redis.call('HGET', jk, 'worker') == ARGV[1]
  if st == 'queued' or running_here then
    local attempts = tonumber(redis.call('HGET', jk, 'attempts') or '0')
    local final = nil
    if running_here and redis.call('HGET', jk, 'cancel_requested') == '1' then
      final = 'cancelled'
    elseif running_here and attempts >= tonumber(ARGV[6]) then
      final = 'failed'
      redis.call('HSET', jk, 'error', ARGV[7])
    end
    if final then
      redis.call('HSET', jk, 'status', final, 'worker', '', 'updated_at', ARGV[4])
      redis.call('DEL', ARGV[3] .. id)
      redis.call('EXPIRE', jk, ARGV[5])
    else
      redis.call('HSET', jk, 'status', 'queued', 'worker', '', 'pages_done', '0',
                 'updated_at', ARGV[4])
      redis.call('RPUSH', queue_of(ARGV[9], jk), id)
      local owned = owner_set(ARGV[8], jk)
      if owned then redis.call('SADD', owned, id) end
      n = n + 1
    end
  end
end
redis.call('SREM', KEYS[3], ARGV[1])
return n
"""
)


RETURN_UNSTARTED = (
    _QUEUE_OF
    + """
-- KEYS: processing; ARGV: job prefix, queue base -> ids moved back (still 'queued')
local n = 0
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if redis.call('HGET', ARGV[1] .. id, 'status') == 'queued' then
    redis.call('LREM', KEYS[1], 0, id)
    redis.call('RPUSH', queue_of(ARGV[2], ARGV[1] .. id), id)
    n = n + 1
  end
end
return n
"""
)

ADOPT = """
-- KEYS: orphaned queue, adopting queue; ARGV: job prefix, adopting revision, now
-- Moves every job of a revision that has no live pod left to a live revision's queue,
-- oldest at the head (they waited longest), and records the new revision on each job.
local n = 0
while true do
  local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not id then break end
  redis.call('HSET', ARGV[1] .. id, 'revision', ARGV[2], 'updated_at', ARGV[3])
  n = n + 1
end
return n
"""
