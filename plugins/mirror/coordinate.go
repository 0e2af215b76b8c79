package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// A mirror partition's state lives on the broker that leads its
// __mirror_state partition (coordKey). Any other broker, the
// destination leader that runs the partition's fetcher included, reads
// and writes it there with ReadMirrorStates and WriteMirrorStates over
// the inter-broker listener (Host.Send), as Kafka's brokers reach a
// group or transaction coordinator. A read-modify-write from another
// broker is not atomic across the two requests; the coordinator still
// refuses every transition the KIP does not allow
// (mirrorstate.State.CanMove), which is what keeps two writers apart: a
// fetcher's EPOCH_FENCING cannot overwrite a failover's STOPPING,
// whichever broker each runs on.

// stateLeader is the broker leading key's __mirror_state partition in
// the latest image, -1 when it has none (yet); exists is false when
// there is no such partition at all (no mirror state was ever kept).
func (p *Plugin) stateLeader(key string) (leader int32, exists bool) {
	img := p.Image()
	if img == nil {
		return -1, false
	}
	t := img.Topics[Topic]
	i := p.PartitionFor(key)
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
func (p *Plugin) coordinated(ctx context.Context, key string, local func() error, remote func(node int32) error) error {
	deadline := time.Now().Add(max(p.cfg.RequestTimeout, 5*time.Second))
	backoff := 20 * time.Millisecond
	for {
		var err error
		leader, exists := p.stateLeader(key)
		if leader < 0 || leader == p.Host().NodeID() {
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

// send sends a mirror state request to node, bounded by the request
// timeout; no answer is errUnreachable (retriable).
func (p *Plugin) send(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	if t := p.cfg.RequestTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	resp, err := p.Host().Send(ctx, node, req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, fmt.Errorf("%w: %w", errUnreachable, err)
		}
		return nil, fmt.Errorf("mirror state coordinator %d: %w: %w", node, errUnreachable, err)
	}
	return resp, nil
}

// readState returns a mirror partition's state from its coordinator.
func (p *Plugin) readState(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := p.coordinated(ctx, coordKey(k.Mirror, id, k.Partition), func() error {
		var err error
		out, err = p.readStateLocal(ctx, k, id)
		return err
	}, func(node int32) error {
		var err error
		out, err = p.readStateRemote(ctx, node, k, id)
		return err
	})
	return out, err
}

// readPartitionRemote asks coordinator node for a partition's state and
// manifest entries.
func (p *Plugin) readPartitionRemote(ctx context.Context, node int32, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorproto.StatePartition, error) {
	req := &mirrorproto.ReadMirrorStatesRequest{MirrorName: k.Mirror, NeedPartitionStates: true,
		Topics: []mirrorproto.PartitionsTopic{{Name: k.Topic, Partitions: []int32{k.Partition}, TopicID: id}}}
	resp, err := p.send(ctx, node, req)
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

func (p *Plugin) readStateRemote(ctx context.Context, node int32, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	sp, err := p.readPartitionRemote(ctx, node, k, id)
	if err != nil {
		return mirrorstate.PartitionState{}, err
	}
	return stateOf(&sp, id), nil
}

// stateOf is the persisted state a coordinator answered; id is the topic
// ID asked for, for an answer without one.
func stateOf(sp *mirrorproto.StatePartition, id uuid.UUID) mirrorstate.PartitionState {
	st := mirrorstate.PartitionState{State: mirrorstate.State(sp.State), Reason: sp.Reason, TopicID: sp.TopicID, LMO: sp.LastMirroredOffset, LME: sp.LastMirrorEpoch,
		StopAt: sp.StopOffset, StopEpoch: sp.StopEpoch, StopDone: sp.StopDone, StopIndex: sp.StopIndex,
		Cut: mirrorstate.Cut{Set: sp.CutSet, At: sp.CutAt, Time: sp.CutTime, Records: sp.CutRecords, Ms: sp.CutMs}, CompleteAt: sp.CompleteAt}
	if st.TopicID.IsZero() {
		st.TopicID = id
	}
	return st
}

// writeState persists a partition's new state (and offsets, when they
// changed) on its coordinator, refusing transitions the KIP does not
// allow. On another broker's coordinator it reads the state, applies
// update here and writes the whole result back.
func (p *Plugin) writeState(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, update func(st *mirrorstate.PartitionState) error) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := p.coordinated(ctx, coordKey(k.Mirror, id, k.Partition), func() error {
		var err error
		out, err = p.writeStateLocal(ctx, k, id, update)
		return err
	}, func(node int32) error {
		cur, err := p.readStateRemote(ctx, node, k, id)
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
		if err := p.writeRemote(ctx, node, k, statePartition(k.Partition, id, next)); err != nil {
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
func (p *Plugin) writeRemoteTopics(ctx context.Context, node int32, mirror string, topics map[string][]mirrorproto.StatePartition) error {
	req := &mirrorproto.WriteMirrorStatesRequest{MirrorName: mirror}
	for name, parts := range topics {
		req.TopicsUpdated = append(req.TopicsUpdated, mirrorproto.StatesTopic{Name: name, Partitions: parts})
	}
	resp, err := p.send(ctx, node, req)
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
func (p *Plugin) writeRemote(ctx context.Context, node int32, k mirrorstate.PartitionKey, sp mirrorproto.StatePartition) error {
	req := &mirrorproto.WriteMirrorStatesRequest{MirrorName: k.Mirror, TopicsUpdated: []mirrorproto.StatesTopic{{Name: k.Topic, Partitions: []mirrorproto.StatePartition{sp}}}}
	resp, err := p.send(ctx, node, req)
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

// StatePartitionFor is the __mirror_state partition (of n) whose leader
// coordinates a mirror partition's state: tests use it to find the
// broker to kill.
func StatePartitionFor(mirror string, topicID uuid.UUID, partition, n int32) int32 {
	return coord.PartitionFor(coordKey(mirror, topicID, partition), n)
}

// imageWait bounds how long a request naming a mirror waits for this
// broker's metadata to catch up with the controller's.
const imageWait = 2 * time.Second

// awaitMirrors returns the latest image. When it lacks a mirror of names
// (one created through another broker a moment ago reaches this broker's
// image a few milliseconds later), or names is empty (every mirror), it
// first catches up with every change the controller has made, for at
// most imageWait: a mirror still missing then does not exist.
func (p *Plugin) awaitMirrors(ctx context.Context, names ...string) *metadata.Image {
	md := p.Host().Metadata()
	img := md.Image()
	if len(names) > 0 && !slices.ContainsFunc(names, func(n string) bool { return img.Mirrors[n] == nil }) {
		return img
	}
	return p.latestImage(ctx, names...)
}

// latestImage returns the image once it holds every change the controller
// has made (or after imageWait): what an operator changed through one
// broker a moment ago, another broker then shows (a topic added to a
// mirror, read by --describe right after --add).
func (p *Plugin) latestImage(ctx context.Context, names ...string) *metadata.Image {
	md := p.Host().Metadata()
	ctx, cancel := context.WithTimeout(ctx, imageWait)
	defer cancel()
	if err := md.CatchUp(ctx); err != nil {
		p.log.Debug("catching up with the controller's metadata", "mirrors", names, "err", err)
	}
	return md.Image()
}

// remoteMirror is what the other leaders of a mirror's partitions told
// of it: their partitions' source side, their divergence manifests, and
// whether their runs can use the source (errCode, errMsg: the first
// failure one reported).
type remoteMirror struct {
	details  map[topicPartition]mirrorproto.PartitionDetail
	diverged []mirrorproto.DivergedRange
	errCode  int16
	errMsg   string
}

// remoteView asks every other broker leading a partition of the mirror
// (and every leader of __mirror_state, whose manifests it merges) for its
// own view (DescribeMirrors with Local). A leader that does not answer
// leaves its partitions out: their lag stays unknown, never 0.
func (p *Plugin) remoteView(ctx context.Context, mirror string) remoteMirror {
	out := remoteMirror{details: map[topicPartition]mirrorproto.PartitionDetail{}}
	img := p.Image()
	m := img.Mirrors[mirror]
	if m == nil {
		return out
	}
	self := p.Host().NodeID()
	led := map[int32][]topicPartition{}
	for name := range m.Topics {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			if l := t.Partitions[i].Leader; l >= 0 && l != self {
				led[l] = append(led[l], topicPartition{Topic: name, Partition: int32(i)})
			}
		}
	}
	if t := img.Topics[Topic]; t != nil {
		for _, pp := range t.Partitions {
			if l := pp.Leader; l >= 0 && l != self && led[l] == nil {
				led[l] = []topicPartition{}
			}
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, keys := range led {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Contain(func() {
				resp, err := p.send(ctx, node, &mirrorproto.DescribeMirrorsRequest{MirrorNames: []string{mirror}, Local: true})
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, dm := range resp.(*mirrorproto.DescribeMirrorsResponse).Mirrors {
					if dm.ErrorCode != 0 && dm.State == "" {
						continue // not described there (not in its image yet)
					}
					if dm.ErrorCode != 0 && out.errCode == 0 {
						// Described, and its run fails: its partitions
						// are described too, with their reasons.
						out.errCode = dm.ErrorCode
						if dm.ErrorMessage != nil {
							out.errMsg = *dm.ErrorMessage
						}
					}
					out.diverged = append(out.diverged, dm.Diverged...)
					for _, dt := range dm.Topics {
						for _, pd := range dt.Partitions {
							if k := (topicPartition{Topic: dt.TopicName, Partition: pd.PartitionIndex}); slices.Contains(keys, k) {
								out.details[k] = pd
							}
						}
					}
				}
			})
		}()
	}
	wg.Wait()
	return out
}

// remoteDetailsOnly is remoteView's partition details.
func (p *Plugin) remoteDetailsOnly(ctx context.Context, mirror string) map[topicPartition]mirrorproto.PartitionDetail {
	return p.remoteView(ctx, mirror).details
}

// readStatesBatch reads the states of a mirror's partitions with one
// ReadMirrorStates per coordinating broker (the control loop reads every
// partition this broker leads each round). Partitions it could not read
// so (a coordinator that moved or did not answer) are left out: the
// caller reads those one by one, with readState's retries.
func (p *Plugin) readStatesBatch(ctx context.Context, mirror string, parts map[topicPartition]uuid.UUID) map[topicPartition]mirrorstate.PartitionState {
	out := map[topicPartition]mirrorstate.PartitionState{}
	byNode := map[int32][]topicPartition{}
	for k, id := range parts {
		leader, _ := p.stateLeader(coordKey(mirror, id, k.Partition))
		if leader < 0 || leader == p.Host().NodeID() {
			if st, err := p.readStateLocal(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: k.Topic, Partition: k.Partition}, id); err == nil {
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
		resp, err := p.send(ctx, node, req)
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
				out[k] = stateOf(&sp, id)
			}
		}
	}
	return out
}
