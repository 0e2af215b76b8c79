package engine

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// lazySyncInterval is how often data appended without waiting for a sync
// (tandem.log.sync=false, acks=0) is fsynced and its metadata written, so
// that recovery after a crash has little to replay.
const lazySyncInterval = time.Second

// syncer group-commits appends: one goroutine fsyncs every segment file
// written since its last round, then writes the metadata of what became
// durable (index entries, producer state, epochs, aborted transactions,
// recovery points) to Pebble in one unsynced batch per partition, then
// wakes the appends that wait. Appends arriving during a round wait for
// the next one, so one fdatasync per file covers all of them.
//
// Pebble never holds metadata of bytes that are not durable in a segment
// file: a crash can lose Pebble's unsynced tail (recovery then replays
// the segment from the last recovery point), but never leaves Pebble
// ahead of the log.
type syncer struct {
	e    *Engine
	kick chan struct{}

	mu    sync.Mutex
	dirty []*Partition // partitions with pending metadata, in the order they got it
	next  *syncRound   // the round that will cover appends registered now
}

// syncRound is one group commit. Its done channel closes when the files
// are synced; failed holds the partitions whose sync failed.
type syncRound struct {
	done   chan struct{}
	failed map[*Partition]error
}

func newSyncRound() *syncRound { return &syncRound{done: make(chan struct{})} }

func newSyncer(e *Engine) *syncer {
	return &syncer{e: e, kick: make(chan struct{}, 1), next: newSyncRound()}
}

// register notes that p has pending metadata and returns the round that
// will cover what p has written so far. urgent wakes the syncer (an
// append waits for it); otherwise the lazy timer picks p up. The caller
// holds p.mu.
func (s *syncer) register(p *Partition, urgent bool) *syncRound {
	s.mu.Lock()
	if !p.dirty {
		p.dirty = true
		s.dirty = append(s.dirty, p)
	}
	r := s.next
	s.mu.Unlock()
	if urgent {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return r
}

// run is the syncer goroutine; it returns after a last round once stop
// is closed.
func (s *syncer) run(stop <-chan struct{}) {
	t := time.NewTicker(lazySyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.kick:
		case <-t.C:
		case <-stop:
			s.round()
			return
		}
		s.round()
	}
}

// round runs one group commit.
func (s *syncer) round() {
	s.mu.Lock()
	parts, r := s.dirty, s.next
	for _, p := range parts {
		p.dirty = false
	}
	s.dirty, s.next = nil, newSyncRound()
	s.mu.Unlock()
	defer close(r.done)
	if len(parts) == 0 {
		return
	}
	type work struct {
		p   *Partition
		w   pendingMeta
		err error
	}
	ws := make([]work, 0, len(parts))
	for _, p := range parts {
		// metaMu is held until the metadata is applied: a truncation or
		// retention pass of p waits for this round rather than commit
		// before entries taken here.
		p.metaMu.Lock()
		p.mu.Lock()
		w, ok := p.takePendingLocked()
		p.mu.Unlock()
		if !ok {
			p.metaMu.Unlock()
			continue
		}
		ws = append(ws, work{p: p, w: w})
	}
	// fdatasync in parallel: the filesystem merges concurrent syncs into
	// one journal commit, where one after the other would each wait for
	// their own.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range ws {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ws[i].err = ws[i].w.sync(s.e)
		}()
	}
	wg.Wait()
	for i := range ws {
		w := &ws[i]
		if w.err != nil {
			if r.failed == nil {
				r.failed = make(map[*Partition]error)
			}
			r.failed[w.p] = w.err
			w.p.syncFailed(w.w, w.err)
		} else {
			w.p.applyPending(w.w, pebble.NoSync)
			w.p.advance(w.w.end)
		}
		w.p.metaMu.Unlock()
	}
}
