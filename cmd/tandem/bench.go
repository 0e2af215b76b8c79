package main

import (
	"log/slog"

	"github.com/tandem-kafka/tandem/bench"
)

// runBench hands `tandem bench ARGS` to the benchmark harness, whose Tandem
// broker processes carry the same plugins as `tandem serve`.
func runBench(args []string) int {
	return bench.MainWithPlugins(args, func() []any { return plugins(nil, slog.Default()) })
}
