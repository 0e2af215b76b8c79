package checker

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// GroupOffsets checks that a consumer group's committed offsets never
// move backwards: an offset the coordinator acknowledged (Committed) is
// what every later OffsetFetch answers at least, and one answer is never
// below an earlier one. A coordinator that lost an acknowledged commit
// (a partition of __consumer_offsets that forgot acknowledged records)
// breaks the first; one that served an old state after a newer one (two
// coordinators at once) the second. The group must have one member, so
// that its commits only go forward.
type GroupOffsets struct {
	mu       sync.Mutex
	acked    map[int32]int64 // the highest acknowledged commit
	seen     map[int32]int64 // the highest offset an OffsetFetch answered
	commits  int
	fetches  int
	problems []string
}

// Committed records a commit the coordinator acknowledged.
func (g *GroupOffsets) Committed(p int32, offset int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.acked == nil {
		g.acked = map[int32]int64{}
	}
	g.commits++
	g.acked[p] = max(g.acked[p], offset)
}

// Floor is what an OffsetFetch issued now must answer at least: the
// acknowledged commits and the answers so far. Take it before the
// request, and give it to Fetched with the answer.
func (g *GroupOffsets) Floor() Floor {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Floor{acked: maps.Clone(g.acked), seen: maps.Clone(g.seen)}
}

// Floor is what GroupOffsets.Floor returns.
type Floor struct{ acked, seen map[int32]int64 }

// Fetched records an OffsetFetch answer (partition → committed offset,
// absent when none) to a request issued after floor was taken.
func (g *GroupOffsets) Fetched(floor Floor, got map[int32]int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen == nil {
		g.seen = map[int32]int64{}
	}
	g.fetches++
	at := time.Now().UTC().Format("15:04:05.000")
	for _, l := range []struct {
		what string
		by   map[int32]int64
	}{{"was acknowledged", floor.acked}, {"an earlier read answered", floor.seen}} {
		for _, p := range slices.Sorted(maps.Keys(l.by)) {
			o, ok := got[p]
			if !ok {
				o = -1
			}
			if o < l.by[p] && len(g.problems) < 100 {
				g.problems = append(g.problems, fmt.Sprintf("%s: partition %d: committed offset %d, after %d %s", at, p, o, l.by[p], l.what))
			}
		}
	}
	for p, o := range got {
		g.seen[p] = max(g.seen[p], o)
	}
}

// Report is the number of acknowledged commits and of fetches checked,
// and each offset that moved backwards.
func (g *GroupOffsets) Report() (commits, fetches int, problems []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.commits, g.fetches, slices.Clone(g.problems)
}
