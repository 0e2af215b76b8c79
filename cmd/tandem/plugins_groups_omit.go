//go:build tandem_omit_groups

package main

// withGroups: the consumer-groups plugin is compiled out.
func withGroups(ps []any, _ map[string]string) []any { return ps }
