package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/bench"
)

// runBench hands `tandem bench ARGS` to the benchmark harness, whose Tandem
// broker processes carry the same plugins as `tandem serve`, logging
// warnings and errors as the harness's brokers do. The harness writes to
// the process's stdout and stderr itself.
func runBench(args []string, _, _ io.Writer) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return bench.MainWithPlugins(args, func() []any {
		ps, err := tandem.Plugins(nil, log)
		if err != nil { // nil properties are always valid
			panic(err)
		}
		return ps
	})
}
