package main

import "github.com/tandem-kafka/tandem"

// plugins are the plugins of this build for the brokers demo.go starts,
// whose properties are constants (a bad one is a bug). It goes away when
// demo.go builds its brokers with tandem.NewBroker, as serve does.
func plugins(props map[string]string) []any {
	ps, err := tandem.Plugins(props, nil)
	if err != nil {
		panic(err)
	}
	return ps
}
