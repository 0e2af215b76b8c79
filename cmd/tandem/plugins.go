package main

// plugins returns the plugins passed to server.New: values implementing the
// hook interfaces of package server (LeaderObserver, MetadataObserver,
// Lifecycle, ...) and of package engine (AppendValidator, AppendObserver).
//
// This is the one place that names every plugin, so that the plugin packages
// never register themselves into global state. Each plugin is wired from
// its own file guarded by a build tag, so that it can be compiled out:
//
//	//go:build !tandem_omit_groups
//
//	package main
//
//	import "github.com/tandem-kafka/tandem/plugins/groups"
//
//	func init() { pluginCtors = append(pluginCtors, groups.New) }
//
// (pluginCtors is appended to at init time, before main runs, and only in
// this binary: it is not shared by brokers embedded elsewhere.) No plugin
// exists yet, so the list is empty.
var pluginCtors []func() any

func plugins() []any {
	ps := make([]any, 0, len(pluginCtors))
	for _, ctor := range pluginCtors {
		ps = append(ps, ctor())
	}
	return ps
}
