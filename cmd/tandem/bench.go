package main

import "github.com/tandem-kafka/tandem/bench"

// runBench hands `tandem bench ARGS` to the benchmark harness.
func runBench(args []string) int { return bench.Main(args) }
