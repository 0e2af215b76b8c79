package bench

import (
	"context"
	"errors"
)

// ScaleResult is what a mirror-scale workload measured.
type ScaleResult struct{}

func (r *Runner) runMirrorScale(ctx context.Context, dir string, w Workload) (Result, error) {
	return Result{Workload: w, Target: "tandem"}, errors.New("not built yet")
}

const scaleAbout = ""

func (s *ScaleResult) line() string    { return "" }
func (s *ScaleResult) check() error    { return nil }
func (rep *Report) scaleTable() *table { return &table{} }
