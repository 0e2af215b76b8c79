// Package fuzz sends fuzzed requests of every API key that a broker with
// every plugin advertises, and fails on anything that crashes or wedges it
// (FuzzRequests). CI runs it for about 30 seconds:
//
//	go test -run '^$' -fuzz '^FuzzRequests$' -fuzztime 30s ./testing/fuzz
//
// and plain `go test` replays the seeds and the past crashers kept in
// testdata/fuzz/FuzzRequests as regression cases.
package fuzz
