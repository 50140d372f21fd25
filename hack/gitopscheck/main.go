// Command gitopscheck says what Flux and Argo CD conclude about an object, with their own code:
//
//   - Flux (kustomize-controller's health checks, `flux` CLI): kstatus, sigs.k8s.io/cli-utils
//     pkg/kstatus/status.Compute;
//   - Argo CD: a health or action Lua script run in gopher-lua the way Argo CD's util/lua runs it
//     (the same libraries, the `obj` and `actionParams` globals, its JSON encoding of the result,
//     and the merge patch its API server sends for an action).
//
// WHY a separate program: the operator's tests must judge our status and our chart's scripts by
// the tools' code, not by our reading of their conventions (issue 28). It reads one JSON request
// per line on stdin and writes one JSON reply per line, so a test session starts it once.
//
// Requests ("op"):
//
//	{"op":"kstatus","object":{...}}                        -> {"status":"Current","message":"..."}
//	{"op":"health","object":{...},"script":"..."}          -> {"status":"Healthy","message":"..."}
//	{"op":"discover","object":{...},"script":"..."}        -> {"actions":{"promote":{"disabled":false,...}}}
//	{"op":"action","object":{...},"script":"...","params":{"weight":"25"}}
//	                                                       -> {"object":{...},"patch":{...}}
//
// A failure answers {"error":"..."} on the same line.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type request struct {
	Op     string            `json:"op"`
	Object json.RawMessage   `json:"object"`
	Script string            `json:"script"`
	Params map[string]string `json:"params"`
}

func main() {
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			reply, herr := handle(line)
			if herr != nil {
				reply = map[string]any{"error": herr.Error()}
			}
			if eerr := out.Encode(reply); eerr != nil {
				fmt.Fprintln(os.Stderr, "gitopscheck:", eerr)
				os.Exit(1)
			}
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gitopscheck:", err)
			os.Exit(1)
		}
	}
}

func handle(line []byte) (any, error) {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return nil, fmt.Errorf("bad request: %w", err)
	}
	// The way Argo CD and Flux hold a live object: JSON from the API server decoded into
	// unstructured (integers become int64, as in their informer caches).
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(req.Object); err != nil {
		return nil, fmt.Errorf("bad object: %w", err)
	}
	switch req.Op {
	case "kstatus":
		res, err := status.Compute(obj)
		if err != nil {
			return nil, err
		}
		return map[string]any{"status": res.Status.String(), "message": res.Message}, nil
	case "health":
		return executeHealth(obj, req.Script)
	case "discover":
		return executeDiscovery(obj, req.Script)
	case "action":
		return executeAction(obj, req.Script, req.Params)
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}
