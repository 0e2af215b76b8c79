package mirror

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/statestore"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// A mirror partition's state is the state store's (statestore): where
// it lives, reading and writing it there or remotely. Here are the views
// of a mirror the plugin gathers: this broker's metadata caught up with
// the controller's, and the other leaders' views of its partitions.

// storeCoordinator is the plugin's coordinator as the state store sees
// it (statestore.Coordinator).
type storeCoordinator struct{ *plugin.Coordinator }

func (c storeCoordinator) NodeID() int32 { return c.Host().NodeID() }

func (c storeCoordinator) Send(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	return c.Host().Send(ctx, node, req)
}

// StatePartitionFor is the __mirror_state partition (of n) whose leader
// coordinates a mirror partition's state: tests use it to find the
// broker to kill.
func StatePartitionFor(mirror string, topicID uuid.UUID, partition, n int32) int32 {
	return coord.PartitionFor(statestore.Key(mirror, topicID, partition), n)
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
				resp, err := p.store.Send(ctx, node, &mirrorproto.DescribeMirrorsRequest{MirrorNames: []string{mirror}, Local: true})
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
