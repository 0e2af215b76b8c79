package main

import "log/slog"

// plugins returns the plugins passed to server.New: values implementing the
// hook interfaces of package server (LeaderObserver, MetadataObserver,
// Lifecycle, APIHandler, CoordinatorLocator, ...) and of package engine
// (AppendValidator, AppendObserver), built from the broker properties;
// they log through the broker's logger, so that --log-level holds.
//
// This is the one place that names every plugin; plugin packages never
// register themselves into global state. Each plugin is wired by a
// with<Plugin> function in its own file guarded by a build tag, with a
// no-op twin under the opposite tag, so that it can be compiled out
// (e.g. -tags tandem_omit_groups).
func plugins(props map[string]string, log *slog.Logger) []any {
	var ps []any
	ps = withGroups(ps, props, log)
	ps = withTxn(ps, props, log)
	ps = withACL(ps, props)
	ps = withMirror(ps, props, log)
	return ps
}
