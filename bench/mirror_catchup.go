package bench

import (
	"context"
	"errors"
)

// CatchUpResult is what a mirror-catchup workload measured.
type CatchUpResult struct{ ProduceCPUSecPerGB, DstCPUSecPerGB, SrcCPUSecPerGB float64 }

func (r *Runner) runMirrorCatchUp(ctx context.Context, dir string, w Workload) (Result, error) {
	return Result{Workload: w, Target: "tandem"}, errors.New("not built yet")
}

const catchUpAbout = ""

func (c *CatchUpResult) line() string             { return "" }
func (c *CatchUpResult) check() error             { return nil }
func (c *CatchUpResult) rate() float64            { return 0 }
func (rep *Report) catchUpTable(l *Limits) *table { return &table{} }
