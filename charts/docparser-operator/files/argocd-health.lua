-- Argo CD health check for docparser.io/DocParser.
-- Argo CD has no generic health check for custom resources; install this as
--   resource.customizations.health.docparser.io_DocParser
-- in argocd-cm (see docs/operations.md). It reads the conditions the operator writes in the
-- order Flux's kstatus reads them, so both tools agree on every state (hack/gitopscheck):
-- Current/Healthy, InProgress/Progressing, Failed/Degraded. It keys on Stalled, not on
-- Degraded: an advisory reason (an autoscaler without its metric, a pod restarting after it
-- served) is Degraded=True but blocks nothing, and a rollout stays Progressing until it ends.
-- Uses only what Argo CD gives argocd-cm scripts (base and table libraries).
local hs = {}
if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to report status"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  hs.status = "Progressing"
  hs.message = "the operator has not acted on generation " .. tostring(generation) .. " yet"
  return hs
end
local ready = nil
for _, c in ipairs(obj.status.conditions or {}) do
  if c.type == "Reconciling" and c.status == "True" then
    hs.status = "Progressing"
    hs.message = c.message or ""
    return hs
  end
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = c.message or ""
    return hs
  end
  if c.type == "Ready" then
    ready = c
  end
end
if ready ~= nil and (ready.status == "False" or ready.status == "Unknown") then
  hs.status = "Progressing"
  hs.message = ready.message or ""
  return hs
end
hs.status = "Healthy"
if ready ~= nil then
  hs.message = ready.message or ""
else
  hs.message = "no Ready condition"
end
return hs
