package fetch

import (
	"context"
	"testing"
	"time"
)

// TestSizesFollowTheLink: limits double while answers come back bound by
// them, up to maxAnswerLimit or what the budget has left, and halve back
// to where they started after a run of small answers; what a fetcher
// holds is what the budget counts.
func TestSizesFollowTheLink(t *testing.T) {
	b := NewBudget(48 << 20)
	s := newSizes(b, 0, 0, false)
	ctx := context.Background()
	if err := s.reserve(ctx); err != nil {
		t.Fatal(err)
	}
	if s.answer != DefaultMaxBytes || s.partition != DefaultPartitionMaxBytes || b.Used() != DefaultMaxBytes {
		t.Fatalf("start: answer %d partition %d used %d", s.answer, s.partition, b.Used())
	}
	s.adapt(int(s.answer), true) // a full answer, a partition at its limit
	if s.answer != 2*DefaultMaxBytes || s.partition != 2*DefaultPartitionMaxBytes {
		t.Fatalf("after a full answer: answer %d partition %d", s.answer, s.partition)
	}
	s.adapt(int(s.answer), true) // 40 MiB: fits the 48 MiB budget
	s.adapt(int(s.answer), true) // 80 MiB: does not
	if s.answer != 40<<20 || b.Used() != 40<<20 || s.held != 40<<20 {
		t.Fatalf("at the budget: answer %d held %d used %d, want 40 MiB each", s.answer, s.held, b.Used())
	}
	for range shrinkAfter {
		s.adapt(0, false)
	}
	if s.answer != 20<<20 || b.Used() != 20<<20 {
		t.Fatalf("after %d empty answers: answer %d used %d, want 20 MiB", shrinkAfter, s.answer, b.Used())
	}
	for range 10 * shrinkAfter {
		s.adapt(0, false)
	}
	if s.answer != DefaultMaxBytes || s.partition != DefaultPartitionMaxBytes {
		t.Fatalf("idle: answer %d partition %d, want the defaults", s.answer, s.partition)
	}
	s.release(0)
	if b.Used() != 0 {
		t.Fatalf("released: %d still used", b.Used())
	}
}

// TestFixedSizes: limits the operator set never move.
func TestFixedSizes(t *testing.T) {
	s := newSizes(NewBudget(1<<30), 1<<20, 1<<10, true)
	for range 5 {
		s.adapt(int(s.answer), true)
	}
	if s.answer != 1<<20 || s.partition != 1<<10 {
		t.Fatalf("fixed sizes moved: answer %d partition %d", s.answer, s.partition)
	}
}

// TestBudgetWaits: a reservation that does not fit waits for a release,
// and gives up when its context ends.
func TestBudgetWaits(t *testing.T) {
	b := NewBudget(10)
	if err := b.take(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.take(ctx, 5); err == nil {
		t.Fatal("took 5 of the 2 left")
	}
	got := make(chan error, 1)
	go func() { got <- b.take(context.Background(), 5) }()
	b.give(8)
	if err := <-got; err != nil || b.Used() != 5 {
		t.Fatalf("after a release: %v, used %d", err, b.Used())
	}
	if !b.tryTake(5) || b.tryTake(1) {
		t.Fatalf("tryTake: used %d of 10", b.Used())
	}
}
