// Package apply is the mirror's apply stage: what a fetcher's answer
// does to a destination partition. An answer with a diverging epoch
// truncates the log (epoch-based truncation); OFFSET_OUT_OF_RANGE
// empties it to restart at the source's log start, or cuts it to the
// source's end; an answer of records is appended unchanged, and an
// append the engine refuses for an epoch above the destination's fences
// the partition. Each answer also records what it told of the
// partition's progress (Progress): the source's end offset, the
// destination's, whether the log caught up. Before a partition is
// fetched, PREPARING cuts its log to the source's last mirror epoch
// (TruncateToLME), with the same Target.
//
// The stage reaches the mirror's run (plugins/mirror, applytarget.go)
// only through Target, for the partition's state, its log and what the
// run does to a partition (truncate it with quarantine, fail it, fence
// it, mark it troubled), and through Source for the ListOffsets it asks
// the source, so that it does not import the plugin. The run's partition
// type is the stage's type parameter: the stage hands it back to Target
// as it was given.
package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server/plugin"
)

type topicPartition = mirrorstate.TopicPartition

// Partition is a partition of the run as the stage sees it. Name is
// fixed; the other methods are called with the Stage's Mu held.
type Partition interface {
	// Name is the partition's name here and its topic's ID.
	Name() (topicPartition, uuid.UUID)
	// Progress is what the stage records of the partition.
	Progress() *Progress
	// Leader is the partition's leader on the source (-1: unknown).
	Leader() int32
	// ClearTrouble is told that the source just answered for the
	// partition: whatever kept it from being copied is gone.
	ClearTrouble()
}

// Target is the mirror's run as the stage sees it. Its methods are
// called without the Stage's Mu; Truncate with ApplyMu held.
type Target[P Partition] interface {
	// State is p's state now: UNKNOWN once this broker no longer leads
	// it.
	State(p P) mirrorstate.State
	// Log is p's log on this broker.
	Log(p P) (plugin.Log, error)
	// Truncate cuts p's log at offset to, first quarantining what that
	// removes (cause says why); an error leaves the log as it was.
	Truncate(p P, log plugin.Log, to int64, cause string) error
	// Fail records err, local and not retriable, as p's FAILED state,
	// and returns it (or the error of that write).
	Fail(p P, err error) error
	// Fence moves p to EPOCH_FENCING, to have its leader epoch raised
	// above those of batches, which the log refused as above its own.
	// batches are the fetcher's buffer: Fence must not keep them.
	Fence(p P, batches []byte) error
	// Troubled records err as why p cannot be copied now: the source
	// answered with an error for it, so its leadership or topic moved
	// there.
	Troubled(p P, err error)
	// Moved tells the fetchers that a partition's position moved other
	// than by their own appends.
	Moved()
}

// Source is the source cluster as the stage asks it.
type Source[P Partition] interface {
	// ListOffsets asks source broker broker for the offsets of parts at
	// timestamp ts, by their names here.
	ListOffsets(broker int32, ts int64, parts []P) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error)
}

// Stage is one mirror's apply stage on this broker.
type Stage[P Partition] struct {
	// Mu guards every partition's Progress and Leader (the run's mutex,
	// never held across I/O).
	Mu *sync.Mutex
	// ApplyMu is held by whoever changes a partition's log: the stage
	// changes one only with it held, and only while it is MIRRORING.
	ApplyMu *sync.Mutex
	Log     *slog.Logger
	Target  Target[P]
	Source  Source[P]
}

// Apply applies one partition of a fetch response sent from offset
// from: truncation on a diverging epoch or a log start past our end,
// then the batches, appended unchanged. It works only on a partition
// still MIRRORING whose log ends where the fetch started, with ApplyMu
// held. The append is written before it returns; wait (nil when nothing
// was appended) waits until it is durable and finishes the partition's
// bookkeeping, without ApplyMu and without the answer's bytes (the
// fetcher reads its next answer into them meanwhile). The fetcher has
// trimmed the batches to whole ones not above the epoch it fetched for.
func (s Stage[P]) Apply(ctx context.Context, p P, from int64, rp *kmsg.FetchResponseTopicPartition) (n int, wait func() error, err error) {
	switch rp.ErrorCode {
	case 0:
	case kerr.OffsetOutOfRange.Code:
		return 0, nil, s.outOfRange(p)
	default:
		err := fmt.Errorf("source partition: %w", kerr.ErrorForCode(rp.ErrorCode))
		s.Target.Troubled(p, err) // leadership or the topic changed on the source
		return 0, nil, err
	}
	ep, written, err := s.appendFetched(ctx, p, from, rp)
	if ref := (writeRefused{}); errors.As(err, &ref) {
		return 0, nil, s.refused(p, rp.RecordBatches, ref.error)
	}
	if err != nil || written == nil {
		return 0, nil, err
	}
	return len(rp.RecordBatches), func() error {
		if _, err := written(); err != nil {
			if s.Target.State(p) != mirrorstate.Mirroring {
				return nil // taken away meanwhile
			}
			return s.Target.Fail(p, fmt.Errorf("append mirrored batches: %w", err))
		}
		s.Mu.Lock()
		pr := p.Progress()
		logStartTo := pr.LogStartTo
		pr.LogStartTo = -1
		s.Mu.Unlock()
		if logStartTo >= 0 {
			// The log changes only with ApplyMu held, and while
			// the partition is still MIRRORING.
			s.ApplyMu.Lock()
			if s.Target.State(p) == mirrorstate.Mirroring {
				if _, err := ep.DeleteRecords(logStartTo); err != nil {
					tp, _ := p.Name()
					s.Log.Warn("mirror: move log start", "topic", tp.Topic, "partition", tp.Partition, "err", err)
				}
			}
			s.ApplyMu.Unlock()
		}
		s.caughtUp(p, ep)
		return nil
	}, nil
}

// appendFetched does Apply's work on the log, with ApplyMu held: a
// diverging epoch's truncation, or the append. written is nil when
// nothing was written (nothing to append, the partition left MIRRORING,
// a truncation); an append refused before anything was written is a
// writeRefused error.
func (s Stage[P]) appendFetched(ctx context.Context, p P, from int64, rp *kmsg.FetchResponseTopicPartition) (ep plugin.Log, written func() (engine.AppendResult, error), err error) {
	s.ApplyMu.Lock()
	defer s.ApplyMu.Unlock()
	if s.Target.State(p) != mirrorstate.Mirroring {
		return nil, nil, nil // taken from the fetcher meanwhile
	}
	if ep, err = s.Target.Log(p); err != nil {
		return nil, nil, err
	}
	s.LearnedEnd(p, rp.HighWatermark)
	tp, id := p.Name()
	if d := rp.DivergingEpoch; d.Epoch >= 0 || d.EndOffset >= 0 {
		// Epoch-based truncation: our last epoch ends earlier on the
		// source (an unclean election there, or a failback).
		_, end := ep.EndOffsetForEpoch(d.Epoch)
		to := min(d.EndOffset, end)
		if end < 0 {
			to = d.EndOffset
		}
		s.Log.Info("mirror epoch truncation", "topic", tp.Topic, "partition", tp.Partition, "epoch", d.Epoch, "offset", to)
		if err := s.Target.Truncate(p, ep, to, fmt.Sprintf("diverging epoch %d", d.Epoch)); err != nil {
			return nil, nil, s.Target.Fail(p, fmt.Errorf("epoch truncation to %d: %w", to, err))
		}
		return ep, nil, nil
	}
	if len(rp.RecordBatches) == 0 {
		s.caughtUp(p, ep)
		return ep, nil, nil
	}
	// The fetcher sends its next Fetch before its appends are durable:
	// if one of them failed meanwhile, the log no longer ends where this
	// answer starts, and appending it would leave a hole.
	s.Mu.Lock()
	end := max(ep.Offsets().LogEnd, p.Progress().LogStartTo)
	s.Mu.Unlock()
	if end != from {
		return ep, nil, fmt.Errorf("fetched from offset %d, the log ends at %d: %w", from, end, engine.ErrUnexpectedAppendOffset)
	}
	written, err = ep.Write(ctx, &engine.AppendRequest{Topic: tp.Topic, TopicID: id, Partition: tp.Partition,
		Origin: engine.OriginCrossCluster, Records: rp.RecordBatches, Acks: -1})
	if err != nil {
		return ep, nil, writeRefused{err}
	}
	return ep, written, nil
}

// writeRefused is an append the engine refused before writing anything.
type writeRefused struct{ error }

func (w writeRefused) Unwrap() error { return w.error }

// refused is what an append refused before anything was written means
// for the partition.
func (s Stage[P]) refused(p P, batches []byte, err error) error {
	switch {
	case errors.Is(err, mirrorproto.ErrMirrorLeaderEpochExceeded):
		return s.Target.Fence(p, batches)
	case errors.Is(err, engine.ErrUnexpectedAppendOffset):
		return err // our log moved meanwhile: fetch again from its end
	}
	if s.Target.State(p) != mirrorstate.Mirroring {
		return nil // the validator saw it taken away first
	}
	return s.Target.Fail(p, fmt.Errorf("append mirrored batches: %w", err))
}

// caughtUp records the partition's log end after an apply.
func (s Stage[P]) caughtUp(p P, ep plugin.Log) {
	leo := ep.Offsets().LogEnd
	s.Mu.Lock()
	defer s.Mu.Unlock()
	p.Progress().CaughtUp(leo)
}

// LearnedEnd records the source's end offset of a partition, just
// learned: the source answered for it.
func (s Stage[P]) LearnedEnd(p P, end int64) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	p.Progress().Learned(end, time.Now())
	p.ClearTrouble()
}

// outOfRange handles OFFSET_OUT_OF_RANGE: below the source's log start
// (retention moved it), the log is emptied and restarts at the source's
// start; above the source's end (an unclean election lost records), the
// log is cut to the source's end. The source is asked first, without
// ApplyMu: a failover never waits for the source.
func (s Stage[P]) outOfRange(p P) error {
	s.Mu.Lock()
	leader := p.Leader()
	s.Mu.Unlock()
	tp, _ := p.Name()
	var start, end int64
	for _, ts := range []int64{-2, -1} {
		offs, err := s.Source.ListOffsets(leader, ts, []P{p})
		if err != nil {
			return err
		}
		lp, ok := offs[tp]
		if !ok {
			return fmt.Errorf("list offsets: malformed response")
		}
		if lp.ErrorCode != 0 {
			return fmt.Errorf("list offsets: %w", kerr.ErrorForCode(lp.ErrorCode))
		}
		if ts == -2 {
			start = lp.Offset
		} else {
			end = lp.Offset
		}
	}
	s.ApplyMu.Lock()
	defer s.ApplyMu.Unlock()
	if s.Target.State(p) != mirrorstate.Mirroring {
		return nil
	}
	ep, err := s.Target.Log(p)
	if err != nil {
		return err
	}
	defer s.Target.Moved() // the fetcher's position moved
	switch leo := ep.Offsets().LogEnd; {
	case leo < start:
		s.Log.Info("mirror: source log start is past our end; restarting there", "topic", tp.Topic, "partition", tp.Partition, "start", start)
		if err := ep.Truncate(0); err != nil {
			return err
		}
		s.Mu.Lock()
		p.Progress().LogStartTo = start
		s.Mu.Unlock()
	case leo > end:
		if err := s.Target.Truncate(p, ep, end, "the source's log ends earlier"); err != nil {
			return s.Target.Fail(p, fmt.Errorf("truncation to the source's end %d: %w", end, err))
		}
	}
	return nil
}
