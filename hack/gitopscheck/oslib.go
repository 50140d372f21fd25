package main

// Argo CD's "safe" os module (util/lua/oslib_safe.go): only time and date. Argo CD registers it
// under the table library's name, so the global `os` stays unset and a script must write
// `local os = require("os")`; this keeps that behaviour, so a script that forgets fails here too.
// Both functions are gopher-lua's own (Argo CD's are copies of them), taken from a scratch state.

import lua "github.com/yuin/gopher-lua"

var safeOsFuncs = func() map[string]lua.LGFunction {
	scratch := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer scratch.Close()
	scratch.Push(scratch.NewFunction(lua.OpenOs))
	scratch.Push(lua.LString(lua.OsLibName))
	scratch.Call(1, 1)
	full := scratch.Get(-1).(*lua.LTable)
	funcs := map[string]lua.LGFunction{}
	for _, name := range []string{"time", "date"} {
		funcs[name] = full.RawGetString(name).(*lua.LFunction).GFunction
	}
	return funcs
}()

func openSafeOs(l *lua.LState) int {
	l.Push(l.RegisterModule(lua.TabLibName, safeOsFuncs))
	return 1
}

func safeOsLoader(l *lua.LState) int {
	l.Push(l.SetFuncs(l.NewTable(), safeOsFuncs))
	return 1
}
