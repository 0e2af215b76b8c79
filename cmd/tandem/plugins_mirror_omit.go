//go:build tandem_omit_mirror

package main

// withMirror: the cluster mirroring plugin is compiled out.
func withMirror(ps []any, _ map[string]string) []any { return ps }
