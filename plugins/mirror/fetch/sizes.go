package fetch

import (
	"sync"
	"time"
)

// A fetcher's fetch sizes follow the link it fetches over. One Fetch is
// in flight per fetcher, so a fetcher carries at most one answer per
// round trip: over a 100 ms link, Kafka's default 1 MiB per partition
// carries 10 MB/s a partition, whatever the bandwidth. So, unless the
// operator set replica.fetch.max.bytes or replica.fetch.response.max.bytes
// (then they are what Kafka makes them, fixed limits), a fetcher starts at
// Kafka's defaults and, over a link whose round trip is at least
// growRTT, doubles a limit each time an answer shows it was the bound (a
// partition returned at least half its limit and had more; the answer at
// least half of its own), up to maxAnswerLimit, and halves it again
// after a run of small answers. Over a short link the limits stay where
// they start: rounds are quick there, and large answers only cost (a
// buffer out of the CPU's caches, tens of MiB to fsync at once that a
// local producer's acknowledgements wait behind). Every limit a fetcher asks for
// is reserved first from the mirror fetchers' Budget, so that the memory
// of all answers is bounded before it is allocated.

// Defaults and bounds of the adaptive sizes.
const (
	// DefaultPartitionMaxBytes and DefaultMaxBytes are Kafka's
	// replica.fetch.max.bytes and replica.fetch.response.max.bytes.
	DefaultPartitionMaxBytes = 1 << 20
	DefaultMaxBytes          = 10 << 20
	// maxAnswerLimit is the most one fetcher asks for in one Fetch:
	// 64 MiB is 0.3 s at 200 MB/s, a cross-continent round trip of a
	// busy cluster's partitions on one source broker.
	maxAnswerLimit = 64 << 20
	// shrinkAfter is the run of small answers (under an eighth of the
	// limit) after which the limits halve, and the buffer is let go.
	shrinkAfter = 50
	// growRTT is the least round trip over which the limits grow.
	growRTT = 5 * time.Millisecond
)

// DefaultBudget is what the mirror fetchers of one broker may reserve for
// their answers together.
const DefaultBudget = 256 << 20

// Budget bounds the bytes the fetchers of a broker reserve for their
// answers beyond their starting limits. A fetcher reserves its answer
// limit before it sends a Fetch and keeps it while it holds a buffer that
// large; it grows only into what the budget has left.
type Budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit}
}

// tryTake reserves n bytes if they fit now.
func (b *Budget) tryTake(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// force reserves n bytes even over the limit: a fetcher's starting limit
// (what Kafka's fetcher would use, replica.fetch.response.max.bytes: the
// budget bounds what fetchers grow beyond it), and an answer larger than
// the limit it was asked with (a first batch larger than the fetch's
// limits is returned whole, KIP-74), which is already on the wire.
func (b *Budget) force(n int64) {
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

func (b *Budget) give(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// Used is what is reserved now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// sizes are one fetcher's limits, what it holds of the budget and its
// answer buffer.
type sizes struct {
	budget            *Budget
	fixed             bool  // the operator set the limits: never adapt
	floorAnswer       int32 // the starting (and least) limits
	floorPartition    int32
	answer, partition int32 // the limits of the next Fetch
	held              int64 // reserved from the budget
	buf               []byte
	small             int // consecutive small answers
}

func newSizes(b *Budget, answer, partition int32, fixed bool) *sizes {
	if answer <= 0 {
		answer = DefaultMaxBytes
	}
	if partition <= 0 {
		partition = DefaultPartitionMaxBytes
	}
	return &sizes{budget: b, fixed: fixed, floorAnswer: answer, floorPartition: partition, answer: answer, partition: partition}
}

// reserve holds the answer limit of the next Fetch before it is sent:
// the starting limit whatever the budget says, more only as adapt got
// it from the budget.
func (s *sizes) reserve() {
	if need := int64(s.answer) - s.held; need > 0 {
		s.budget.force(need)
		s.held += need
	}
}

// grow is conn.recv's: an answer of n bytes does not fit the buffer. The
// new buffer is as large as the answer limit and then some (answers a
// little larger than the last would each allocate, and zero, a fresh
// buffer the kernel then faults in page by page), or n if larger.
func (s *sizes) grow(n int) (int, error) {
	size := max(n, int(s.answer)+answerSlack)
	if extra := int64(size) - s.held; extra > 0 {
		s.budget.force(extra)
		s.held += extra
	}
	return size, nil
}

// answerSlack is what an answer may carry beyond its record bytes
// (headers of its topics and partitions) before its buffer grows.
const answerSlack = 256 << 10

// adapt sets the next limits from an answer: total record bytes, and
// whether some partition was bound by its limit, over a link of round
// trip rtt.
func (s *sizes) adapt(total int, partitionBound bool, rtt time.Duration) {
	if s.fixed {
		return
	}
	if rtt < growRTT {
		partitionBound, total = false, min(total, int(s.answer)/4) // nothing to cover: do not grow
	}
	busy := total >= int(s.answer)/8
	if partitionBound {
		s.partition = min(maxAnswerLimit, 2*s.partition)
	}
	// The answer limit grows with an answer at least half full, and with
	// the partition limit in the same round: a fetcher of one busy
	// partition would otherwise double its limits every other round.
	if (total >= int(s.answer)/2 || s.partition > s.answer) && s.answer < maxAnswerLimit {
		next := min(maxAnswerLimit, max(2*s.answer, s.partition))
		if need := int64(next) - s.held; need <= 0 || s.budget.tryTake(need) {
			s.held = max(s.held, int64(next))
			s.answer = next
		}
	}
	s.partition = min(s.partition, s.answer)
	if busy {
		s.small = 0
		return
	}
	if s.small++; s.small < shrinkAfter {
		return
	}
	s.small = 0
	s.answer = max(s.floorAnswer, s.answer/2)
	s.partition = max(s.floorPartition, min(s.answer, s.partition/2))
	s.release(int64(s.answer))
}

// release gives back what is held above keep, letting the buffer go if
// it is larger.
func (s *sizes) release(keep int64) {
	if int64(cap(s.buf)) > keep {
		s.buf = nil
	}
	if s.held > keep {
		s.budget.give(s.held - keep)
		s.held = keep
	}
}
