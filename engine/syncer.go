package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// lazySyncInterval is how often data appended without waiting for a sync
// (tandem.log.sync=false, acks=0) is fsynced and its metadata written, so
// that recovery after a crash has little to replay.
const lazySyncInterval = time.Second

// syncer group-commits appends: a round fsyncs every segment file written
// since the last round, each in a goroutine of its own, and as each
// file's sync ends writes the metadata of what became durable in it
// (index entries, producer state, epochs, aborted transactions, recovery
// points) to Pebble in one unsynced batch and wakes the appends to it
// that wait. Appends arriving during a round wait for the next one, so
// one fdatasync per file covers all of them. An append does not wait for
// other partitions' syncs (a mirror catching up writes tens of MiB a
// round, which a local producer's few KiB must not wait behind): a round
// does not wait for the syncs it started, and a partition whose last
// sync still runs is left to the next round, which its sync's end
// starts.
//
// Pebble never holds metadata of bytes that are not durable in a segment
// file: a crash can lose Pebble's unsynced tail (recovery then replays
// the segment from the last recovery point), but never leaves Pebble
// ahead of the log.
type syncer struct {
	e    *Engine
	kick chan struct{}
	sem  chan struct{}  // bounds the syncs in flight
	wg   sync.WaitGroup // the syncs in flight

	mu    sync.Mutex
	dirty []*Partition // partitions with pending metadata, in the order they got it
	next  *syncRound   // the round that will cover appends registered now
}

// syncRound is one group commit, by partition.
type syncRound struct {
	parts map[*Partition]*partSync // written under syncer.mu until the round starts
}

// partSync is a partition's part of a round: done closes once its file
// is synced and its metadata written (err: the sync failed). also are
// the parts of earlier rounds that the partition was left out of (its
// sync was running), which end with this one.
type partSync struct {
	done chan struct{}
	err  error
	also []*partSync
}

// end wakes the waiters of ps and of the parts it took over, and of
// those they took over: a partition left out of several rounds in a row
// hands its parts on each time.
func (ps *partSync) end(err error) {
	for _, x := range ps.also {
		x.end(err)
	}
	ps.also = nil
	ps.err = err
	close(ps.done)
}

func newSyncRound() *syncRound { return &syncRound{parts: map[*Partition]*partSync{}} }

func newSyncer(e *Engine) *syncer {
	// fdatasync in parallel: the filesystem merges concurrent syncs into
	// one journal commit, where one after the other would each wait for
	// their own.
	return &syncer{e: e, kick: make(chan struct{}, 1), sem: make(chan struct{}, 8), next: newSyncRound()}
}

// register notes that p has pending metadata and returns p's part of the
// round that will cover what p has written so far. urgent wakes the
// syncer (an append waits for it); otherwise the lazy timer picks p up.
// The caller holds p.mu.
func (s *syncer) register(p *Partition, urgent bool) *partSync {
	s.mu.Lock()
	if !p.dirty {
		p.dirty = true
		s.dirty = append(s.dirty, p)
	}
	ps := s.next.parts[p]
	if ps == nil {
		ps = &partSync{done: make(chan struct{})}
		s.next.parts[p] = ps
	}
	s.mu.Unlock()
	if urgent {
		s.wake()
	}
	return ps
}

func (s *syncer) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
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
			for { // until no partition is left to a next round
				s.round()
				s.wg.Wait()
				s.mu.Lock()
				left := len(s.dirty)
				s.mu.Unlock()
				if left == 0 {
					return
				}
			}
		}
		s.round()
	}
}

// round runs one group commit: it starts the sync of each partition
// with pending metadata and returns.
func (s *syncer) round() {
	s.mu.Lock()
	parts, r := s.dirty, s.next
	for _, p := range parts {
		p.dirty = false
	}
	s.dirty, s.next = nil, newSyncRound()
	s.mu.Unlock()
	for _, p := range parts {
		ps := r.parts[p]
		if p.syncing.Load() {
			s.later(p, ps)
			continue
		}
		// metaMu is held until the metadata is applied: a truncation or
		// retention pass of p waits for this round rather than commit
		// before entries taken here.
		p.metaMu.Lock()
		p.mu.Lock()
		w, ok := p.takePendingLocked()
		p.mu.Unlock()
		if !ok {
			p.metaMu.Unlock()
			ps.end(nil)
			continue
		}
		p.syncing.Store(true)
		s.wg.Add(1)
		s.sem <- struct{}{}
		go func() {
			defer func() { <-s.sem; s.wg.Done() }()
			s.finish(p, w, ps)
		}()
	}
}

// later leaves p's part of a round to the next round: p's last sync
// still runs, and starts that round when it ends.
func (s *syncer) later(p *Partition, ps *partSync) {
	s.mu.Lock()
	if !p.dirty {
		p.dirty = true
		s.dirty = append(s.dirty, p)
	}
	if cur := s.next.parts[p]; cur != nil {
		cur.also = append(cur.also, ps)
	} else {
		s.next.parts[p] = ps
	}
	s.mu.Unlock()
	if !p.syncing.Load() {
		s.wake() // the sync ended meanwhile, before it could see p dirty
	}
}

// finish syncs p's file, writes the metadata that became durable (or
// rolls p back if the sync failed) and wakes p's appends; if more of p
// waits for a round, it starts one.
func (s *syncer) finish(p *Partition, w pendingMeta, ps *partSync) {
	if s.e.testHook != nil {
		s.e.hook(fmt.Sprintf("sync:partition:%s-%d", p.topic, p.part))
	}
	err := w.sync(s.e)
	if err != nil {
		p.syncFailed(w, err)
	} else {
		p.applyPending(w, pebble.NoSync)
		p.advance(w.end)
	}
	p.metaMu.Unlock()
	p.syncing.Store(false)
	ps.end(err)
	s.mu.Lock()
	more := p.dirty
	s.mu.Unlock()
	if more {
		s.wake()
	}
}
