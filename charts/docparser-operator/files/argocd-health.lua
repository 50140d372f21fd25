-- Argo CD health check for docparser.io/DocParser.
-- Argo CD has no generic health check for custom resources; install this as
--   resource.customizations.health.docparser.io_DocParser
-- in argocd-cm (see docs/operations.md). It reads the kstatus-style conditions the
-- operator writes, so a rollout ends Healthy or Degraded, never "Progressing forever".
local hs = {}
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to report status"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "the operator has not acted on generation " .. tostring(generation) .. " yet"
  return hs
end
local conditions = {}
for _, c in ipairs(obj.status.conditions) do
  conditions[c.type] = c
end
local function is_true(t)
  return conditions[t] ~= nil and conditions[t].status == "True"
end
local function message(t)
  if conditions[t] ~= nil and conditions[t].message ~= nil then
    return conditions[t].message
  end
  return ""
end
if is_true("Degraded") or is_true("Stalled") then
  hs.status = "Degraded"
  hs.message = message("Degraded")
  return hs
end
if is_true("Progressing") or is_true("Reconciling") then
  hs.status = "Progressing"
  hs.message = message("Progressing")
  return hs
end
if is_true("Ready") then
  hs.status = "Healthy"
  hs.message = message("Ready")
  return hs
end
hs.status = "Progressing"
hs.message = message("Ready")
return hs
