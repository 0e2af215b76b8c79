//go:build tandem_omit_mirror

package main

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Without the mirror plugin's messages, a mirror topic shows its
// mirror.name config alone, and cluster health cannot see mirrors.

func mirrorClientOpts() []kgo.Opt { return nil }

func mirrorPartitionStates(context.Context, *kgo.Client, string, string) map[int32]string { return nil }

func mirrorProblems(context.Context, *kgo.Client) []string { return nil }
