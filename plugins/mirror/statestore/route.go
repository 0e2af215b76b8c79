package statestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// Leader is the broker leading key's __mirror_state partition in
// the latest image, -1 when it has none (yet); exists is false when
// there is no such partition at all (no mirror state was ever kept).
func (store *Store) Leader(key string) (leader int32, exists bool) {
	img := store.c.Image()
	if img == nil {
		return -1, false
	}
	t := img.Topics[mirrorstate.Topic]
	i := store.c.PartitionFor(key)
	if t == nil || int(i) >= len(t.Partitions) {
		return -1, false
	}
	return t.Partitions[i].Leader, true
}

// coordRetriable reports whether an error of a coordinator call is worth
// another try once leadership settles: the coordinator moved, is
// loading, or its broker cannot be reached (it died and the controller
// has not moved its leaderships yet).
func coordRetriable(err error) bool {
	return errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.BrokerNotAvailable) ||
		errors.Is(err, errUnreachable)
}

// errUnreachable marks a request to the coordinator that got no answer.
var errUnreachable = errors.New("coordinator unreachable")

// coordinated runs local when this broker coordinates key, else remote
// with the coordinator's node ID, and again while the answer says the
// coordinator moved (not when __mirror_state does not exist: a cluster
// that never mirrored has no state to wait for), for up to
// mirror.request.timeout.ms (at least a few
// seconds: a killed coordinator's partitions move after the broker
// session timeout) or until ctx ends.
func (store *Store) coordinated(ctx context.Context, key string, local func() error, remote func(node int32) error) error {
	deadline := time.Now().Add(max(store.timeout, 5*time.Second))
	backoff := 20 * time.Millisecond
	for {
		var err error
		leader, exists := store.Leader(key)
		if leader < 0 || leader == store.c.NodeID() {
			err = local()
		} else {
			err = remote(leader)
		}
		if err == nil || !exists || !coordRetriable(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// Send sends a mirror state request to node, bounded by the request
// timeout; no answer is errUnreachable (retriable).
func (store *Store) Send(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	if t := store.timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	resp, err := store.c.Send(ctx, node, req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, fmt.Errorf("%w: %w", errUnreachable, err)
		}
		return nil, fmt.Errorf("mirror state coordinator %d: %w: %w", node, errUnreachable, err)
	}
	return resp, nil
}

// Read returns a mirror partition's state from its coordinator.
func (store *Store) Read(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := store.coordinated(ctx, Key(k.Mirror, id, k.Partition), func() error {
		var err error
		out, err = store.readLocal(ctx, k, id)
		return err
	}, func(node int32) error {
		var err error
		out, err = store.readRemote(ctx, node, k, id)
		return err
	})
	return out, err
}

// readPartitionRemote asks coordinator node for a partition's state and
// manifest entries.
func (store *Store) readPartitionRemote(ctx context.Context, node int32, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorproto.StatePartition, error) {
	req := &mirrorproto.ReadMirrorStatesRequest{MirrorName: k.Mirror, NeedPartitionStates: true,
		Topics: []mirrorproto.PartitionsTopic{{Name: k.Topic, Partitions: []int32{k.Partition}, TopicID: id}}}
	resp, err := store.Send(ctx, node, req)
	if err != nil {
		return mirrorproto.StatePartition{}, err
	}
	r := resp.(*mirrorproto.ReadMirrorStatesResponse)
	if r.ErrorCode != 0 {
		return mirrorproto.StatePartition{}, fmt.Errorf("reading mirror state on broker %d: %w", node, mirrorproto.ErrorForCode(r.ErrorCode))
	}
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		return mirrorproto.StatePartition{}, fmt.Errorf("reading mirror state on broker %d: %d topics in the answer: %w", node, len(r.Topics), kerr.UnknownServerError)
	}
	sp := r.Topics[0].Partitions[0]
	if sp.ErrorCode != 0 {
		return mirrorproto.StatePartition{}, fmt.Errorf("reading mirror state of %s-%d on broker %d: %w", k.Topic, k.Partition, node, mirrorproto.ErrorForCode(sp.ErrorCode))
	}
	return sp, nil
}

func (store *Store) readRemote(ctx context.Context, node int32, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	sp, err := store.readPartitionRemote(ctx, node, k, id)
	if err != nil {
		return mirrorstate.PartitionState{}, err
	}
	return StateOf(&sp, id), nil
}

// StateOf is the persisted state a coordinator answered; id is the topic
// ID asked for, for an answer without one.
func StateOf(sp *mirrorproto.StatePartition, id uuid.UUID) mirrorstate.PartitionState {
	st := mirrorstate.PartitionState{State: mirrorstate.State(sp.State), Reason: sp.Reason, TopicID: sp.TopicID, LMO: sp.LastMirroredOffset, LME: sp.LastMirrorEpoch,
		StopAt: sp.StopOffset, StopEpoch: sp.StopEpoch, StopDone: sp.StopDone, StopIndex: sp.StopIndex,
		Cut: mirrorstate.Cut{Set: sp.CutSet, At: sp.CutAt, Time: sp.CutTime, Records: sp.CutRecords, Ms: sp.CutMs}, CompleteAt: sp.CompleteAt}
	if st.TopicID.IsZero() {
		st.TopicID = id
	}
	return st
}

// Write persists a partition's new state (and offsets, when they
// changed) on its coordinator, refusing transitions the KIP does not
// allow. On another broker's coordinator it reads the state, applies
// update here and writes the whole result back.
func (store *Store) Write(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, update func(st *mirrorstate.PartitionState) error) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := store.coordinated(ctx, Key(k.Mirror, id, k.Partition), func() error {
		var err error
		out, err = store.writeLocal(ctx, k, id, update)
		return err
	}, func(node int32) error {
		cur, err := store.readRemote(ctx, node, k, id)
		if err != nil {
			return err
		}
		next := cur
		next.TopicID = id
		if err := update(&next); err != nil {
			return err
		}
		if !cur.State.CanMove(next.State) {
			return fmt.Errorf("mirror %s topic %s partition %d: %s cannot move to %s", k.Mirror, k.Topic, k.Partition, cur.State, next.State)
		}
		if next == cur {
			out = next
			return nil
		}
		if err := store.writeRemote(ctx, node, k, statePartition(k.Partition, id, next)); err != nil {
			return err
		}
		out = next
		return nil
	})
	return out, err
}

// statePartition is a partition's state as WriteMirrorStates carries it.
func statePartition(partition int32, id uuid.UUID, st mirrorstate.PartitionState) mirrorproto.StatePartition {
	return mirrorproto.StatePartition{
		PartitionIndex: partition, LastMirroredOffset: st.LMO, State: int8(st.State), LastMirrorEpoch: st.LME,
		Reason: st.Reason, TopicID: id, StopOffset: st.StopAt, StopEpoch: st.StopEpoch, StopDone: st.StopDone, StopIndex: st.StopIndex,
		CutSet: st.Cut.Set, CutAt: st.Cut.At, CutTime: st.Cut.Time, CutRecords: st.Cut.Records, CutMs: st.Cut.Ms, CompleteAt: st.CompleteAt,
	}
}

// writeRemoteTopics sends the states of several partitions, by topic, in
// one WriteMirrorStates to coordinator node.
func (store *Store) writeRemoteTopics(ctx context.Context, node int32, mirror string, topics map[string][]mirrorproto.StatePartition) error {
	req := &mirrorproto.WriteMirrorStatesRequest{MirrorName: mirror}
	for name, parts := range topics {
		req.TopicsUpdated = append(req.TopicsUpdated, mirrorproto.StatesTopic{Name: name, Partitions: parts})
	}
	resp, err := store.Send(ctx, node, req)
	if err != nil {
		return err
	}
	r := resp.(*mirrorproto.WriteMirrorStatesResponse)
	if r.ErrorCode != 0 {
		return fmt.Errorf("writing mirror states on broker %d: %w", node, mirrorproto.ErrorForCode(r.ErrorCode))
	}
	var errs []error
	for _, t := range r.Topics {
		for _, sp := range t.Partitions {
			if sp.ErrorCode != 0 {
				errs = append(errs, fmt.Errorf("writing mirror state of %s-%d on broker %d: %w", t.Name, sp.PartitionIndex, node, mirrorproto.ErrorForCode(sp.ErrorCode)))
			}
		}
	}
	return errors.Join(errs...)
}

// writeRemote sends one partition's WriteMirrorStates to coordinator
// node.
func (store *Store) writeRemote(ctx context.Context, node int32, k mirrorstate.PartitionKey, sp mirrorproto.StatePartition) error {
	req := &mirrorproto.WriteMirrorStatesRequest{MirrorName: k.Mirror, TopicsUpdated: []mirrorproto.StatesTopic{{Name: k.Topic, Partitions: []mirrorproto.StatePartition{sp}}}}
	resp, err := store.Send(ctx, node, req)
	if err != nil {
		return err
	}
	r := resp.(*mirrorproto.WriteMirrorStatesResponse)
	if r.ErrorCode != 0 {
		return fmt.Errorf("writing mirror state on broker %d: %w", node, mirrorproto.ErrorForCode(r.ErrorCode))
	}
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		return fmt.Errorf("writing mirror state on broker %d: %d topics in the answer: %w", node, len(r.Topics), kerr.UnknownServerError)
	}
	if c := r.Topics[0].Partitions[0].ErrorCode; c != 0 {
		return fmt.Errorf("writing mirror state of %s-%d on broker %d: %w", k.Topic, k.Partition, node, mirrorproto.ErrorForCode(c))
	}
	return nil
}

// ReadBatch reads the states of a mirror's partitions with one
// ReadMirrorStates per coordinating broker (the control loop reads every
// partition this broker leads each round). Partitions it could not read
// so (a coordinator that moved or did not answer) are left out: the
// caller reads those one by one, with Read's retries.
func (store *Store) ReadBatch(ctx context.Context, mirror string, parts map[topicPartition]uuid.UUID) map[topicPartition]mirrorstate.PartitionState {
	out := map[topicPartition]mirrorstate.PartitionState{}
	byNode := map[int32][]topicPartition{}
	for k, id := range parts {
		leader, _ := store.Leader(Key(mirror, id, k.Partition))
		if leader < 0 || leader == store.c.NodeID() {
			if st, err := store.readLocal(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: k.Topic, Partition: k.Partition}, id); err == nil {
				out[k] = st
			}
			continue
		}
		byNode[leader] = append(byNode[leader], k)
	}
	for node, keys := range byNode {
		req := &mirrorproto.ReadMirrorStatesRequest{MirrorName: mirror, NeedPartitionStates: true}
		for _, k := range keys {
			i := slices.IndexFunc(req.Topics, func(t mirrorproto.PartitionsTopic) bool { return t.Name == k.Topic })
			if i < 0 {
				req.Topics = append(req.Topics, mirrorproto.PartitionsTopic{Name: k.Topic, TopicID: parts[k]})
				i = len(req.Topics) - 1
			}
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, k.Partition)
		}
		resp, err := store.Send(ctx, node, req)
		if err != nil {
			continue
		}
		for _, t := range resp.(*mirrorproto.ReadMirrorStatesResponse).Topics {
			for _, sp := range t.Partitions {
				k := topicPartition{Topic: t.Name, Partition: sp.PartitionIndex}
				id, ok := parts[k]
				if !ok || sp.ErrorCode != 0 {
					continue
				}
				out[k] = StateOf(&sp, id)
			}
		}
	}
	return out
}
