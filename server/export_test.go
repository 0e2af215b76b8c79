package server

import "github.com/tandem-kafka/tandem/server/plugin"

// PluginHost is the Host a plugin of b is started with, for the tests of
// package server_test: they need a cluster (tandemtest), which the tests
// of package server cannot import.
func PluginHost(b *Broker) plugin.Host { return pluginHost{b: b, name: "test"} }
