package fetch

import (
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
	s.reserve()
	if s.answer != DefaultMaxBytes || s.partition != DefaultPartitionMaxBytes || b.Used() != DefaultMaxBytes {
		t.Fatalf("start: answer %d partition %d used %d", s.answer, s.partition, b.Used())
	}
	s.adapt(int(s.answer), true, time.Second) // a full answer, a partition at its limit
	if s.answer != 2*DefaultMaxBytes || s.partition != 2*DefaultPartitionMaxBytes {
		t.Fatalf("after a full answer: answer %d partition %d", s.answer, s.partition)
	}
	s.adapt(int(s.answer), true, time.Second) // 40 MiB: fits the 48 MiB budget
	s.adapt(int(s.answer), true, time.Second) // 80 MiB: does not
	if s.answer != 40<<20 || b.Used() != 40<<20 || s.held != 40<<20 {
		t.Fatalf("at the budget: answer %d held %d used %d, want 40 MiB each", s.answer, s.held, b.Used())
	}
	for range shrinkAfter {
		s.adapt(0, false, time.Second)
	}
	if s.answer != 20<<20 || b.Used() != 20<<20 {
		t.Fatalf("after %d empty answers: answer %d used %d, want 20 MiB", shrinkAfter, s.answer, b.Used())
	}
	for range 10 * shrinkAfter {
		s.adapt(0, false, time.Second)
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
		s.adapt(int(s.answer), true, time.Second)
	}
	if s.answer != 1<<20 || s.partition != 1<<10 {
		t.Fatalf("fixed sizes moved: answer %d partition %d", s.answer, s.partition)
	}
}

// TestBudgetStartsAnywhere: a fetcher's starting limit is reserved even
// when the budget is spent (it is what Kafka's fetcher would hold); it
// grows only into what the budget has left.
func TestBudgetStartsAnywhere(t *testing.T) {
	b := NewBudget(25 << 20)
	one, two := newSizes(b, 0, 0, false), newSizes(b, 0, 0, false)
	one.reserve()
	two.reserve()
	if b.Used() != 2*DefaultMaxBytes {
		t.Fatalf("used %d, want both starting limits", b.Used())
	}
	two.adapt(int(two.answer), true, time.Second)
	if two.answer != DefaultMaxBytes {
		t.Fatalf("grew to %d over a spent budget", two.answer)
	}
	one.release(0)
	two.adapt(int(two.answer), true, time.Second)
	if two.answer != 2*DefaultMaxBytes || b.Used() != 2*DefaultMaxBytes {
		t.Fatalf("after a release: answer %d used %d", two.answer, b.Used())
	}
}

// TestSizesStayOverAShortLink: over a round trip below growRTT the
// limits stay where they start, however full the answers.
func TestSizesStayOverAShortLink(t *testing.T) {
	s := newSizes(NewBudget(1<<30), 0, 0, false)
	for range 5 {
		s.adapt(int(s.answer), true, time.Millisecond)
	}
	if s.answer != DefaultMaxBytes || s.partition != DefaultPartitionMaxBytes {
		t.Fatalf("over 1 ms: answer %d partition %d, want the defaults", s.answer, s.partition)
	}
}

// TestOnePartitionGrowsEachRound: a fetcher of one busy partition over a
// long link (each answer that partition's limit, bound by it) doubles
// the partition limit every round, the answer limit growing with it in
// the same round, not a round later: over 200 ms a round is at least
// 200 ms, and each round spent at a small limit is a round behind.
func TestOnePartitionGrowsEachRound(t *testing.T) {
	s := newSizes(NewBudget(1<<30), 0, 0, false)
	s.reserve()
	want := int32(DefaultPartitionMaxBytes)
	for want < maxAnswerLimit {
		s.adapt(int(s.partition), true, 200*time.Millisecond)
		want *= 2
		if s.partition != want || s.answer < s.partition {
			t.Fatalf("after an answer of %d bytes: partition %d answer %d, want partition %d", want/2, s.partition, s.answer, want)
		}
	}
	s.adapt(int(s.partition), true, 200*time.Millisecond)
	if s.partition != maxAnswerLimit || s.answer != maxAnswerLimit {
		t.Fatalf("at the most: partition %d answer %d, want %d each", s.partition, s.answer, maxAnswerLimit)
	}
}
