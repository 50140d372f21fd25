package main

// Argo CD's Lua environment, as util/lua/lua.go (v3.x) builds it for health checks, action
// discovery and actions of resources configured in argocd-cm (not the bundled scripts, which get
// the full standard library): package, base and table, plus its "safe" os module (time and date
// only) that a script reaches with require("os"). Each run gets a fresh state and one second.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	luajson "layeh.com/gopher-json"
)

var validHealth = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true, "Healthy": true, "Degraded": true, "Missing": true,
}

func runLua(obj *unstructured.Unstructured, script string, params map[string]string) (*lua.LState, func(), error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, pair := range []struct {
		n string
		f lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.OsLibName, openSafeOs},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(pair.f), NRet: 0, Protect: true}, lua.LString(pair.n)); err != nil {
			l.Close()
			return nil, nil, err
		}
	}
	l.PreloadModule(lua.OsLibName, safeOsLoader)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	l.SetContext(ctx)
	actionParams := l.CreateTable(0, len(params))
	for name, value := range params {
		actionParams.RawSetH(lua.LString(name), lua.LString(value)) // Argo CD passes strings
	}
	l.SetGlobal("actionParams", actionParams)
	l.SetGlobal("obj", decodeValue(l, obj.Object))
	done := func() { cancel(); l.Close() }
	if err := l.DoString(script); err != nil {
		done()
		// As Argo CD: a run-time error reaches the user without gopher-lua's stack trace.
		var apiErr *lua.ApiError
		if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorRun {
			apiErr.StackTrace = ""
		}
		return nil, nil, err
	}
	return l, done, nil
}

func resultJSON(l *lua.LState, what string) ([]byte, error) {
	value := l.Get(-1)
	if value.Type() != lua.LTTable {
		return nil, fmt.Errorf("expect table output from Lua %s script, not %s", what, value.Type())
	}
	return luajson.Encode(value)
}

func executeHealth(obj *unstructured.Unstructured, script string) (any, error) {
	l, done, err := runLua(obj, script, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	raw, err := resultJSON(l, "health")
	if err != nil {
		return nil, err
	}
	var hs struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(raw, &hs); err != nil {
		return nil, err
	}
	if !validHealth[hs.Status] {
		return map[string]any{"status": "Unknown", "message": "Lua returned an invalid health status"}, nil
	}
	return map[string]any{"status": hs.Status, "message": hs.Message}, nil
}

func executeDiscovery(obj *unstructured.Unstructured, script string) (any, error) {
	l, done, err := runLua(obj, script, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	raw, err := resultJSON(l, "discovery")
	if err != nil {
		return nil, err
	}
	actions := map[string]any{}
	if string(raw) == "[]" { // an empty table: no actions
		return map[string]any{"actions": actions}, nil
	}
	if err := json.Unmarshal(raw, &actions); err != nil {
		return nil, err
	}
	return map[string]any{"actions": actions}, nil
}

// executeAction returns the object the action wrote and the merge patch Argo CD's API server
// sends for it (server/application: jsonpatch.CreateMergePatch(live, new)).
func executeAction(obj *unstructured.Unstructured, script string, params map[string]string) (any, error) {
	l, done, err := runLua(obj, script, params)
	if err != nil {
		return nil, err
	}
	defer done()
	raw, err := resultJSON(l, "action")
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(string(raw), "[") {
		return nil, fmt.Errorf("only the old-style action (the modified obj) is checked here")
	}
	var newObj map[string]any
	if err := json.Unmarshal(raw, &newObj); err != nil {
		return nil, err
	}
	newObj = cleanReturnedObj(newObj, obj.Object)
	live, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	written, err := json.Marshal(newObj)
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.CreateMergePatch(live, written)
	if err != nil {
		return nil, err
	}
	return map[string]any{"object": newObj, "patch": json.RawMessage(patch)}, nil
}

// decodeValue is Argo CD's conversion of an unstructured object into Lua tables.
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch converted := value.(type) {
	case bool:
		return lua.LBool(converted)
	case float64:
		return lua.LNumber(converted)
	case string:
		return lua.LString(converted)
	case json.Number:
		return lua.LString(converted)
	case int:
		return lua.LNumber(converted)
	case int32:
		return lua.LNumber(converted)
	case int64:
		return lua.LNumber(converted)
	case []any:
		arr := l.CreateTable(len(converted), 0)
		for _, item := range converted {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(converted))
		for key, item := range converted {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// cleanReturnedObj is Argo CD's repair of empty objects that the Lua JSON encoder wrote as [].
func cleanReturnedObj(newObj, obj map[string]any) map[string]any {
	for key, oldValue := range obj {
		newValue, ok := newObj[key]
		if !ok {
			continue
		}
		switch nv := newValue.(type) {
		case map[string]any:
			if ov, ok := oldValue.(map[string]any); ok {
				newObj[key] = cleanReturnedObj(nv, ov)
			}
		case []any:
			switch ov := oldValue.(type) {
			case map[string]any:
				if len(nv) == 0 {
					newObj[key] = map[string]any{}
				}
			case []any:
				newObj[key] = cleanReturnedArray(nv, ov)
			}
		}
	}
	return newObj
}

func cleanReturnedArray(newObj, obj []any) []any {
	for i := range newObj {
		if i >= len(obj) {
			break
		}
		switch nv := newObj[i].(type) {
		case map[string]any:
			if ov, ok := obj[i].(map[string]any); ok {
				newObj[i] = cleanReturnedObj(nv, ov)
			}
		case []any:
			if ov, ok := obj[i].([]any); ok {
				newObj[i] = cleanReturnedArray(nv, ov)
			}
		}
	}
	return newObj
}
