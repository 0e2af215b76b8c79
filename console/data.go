package console

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// What the pages get, as JSON. An offset or lag that this broker does not
// know (a partition it does not host) is -1, shown as "unknown".

type clusterView struct {
	ClusterID       string       `json:"clusterId"`
	NodeID          int32        `json:"nodeId"`
	ControllerID    int32        `json:"controllerId"`
	Brokers         []brokerView `json:"brokers"`
	Topics          int          `json:"topics"`
	Partitions      int          `json:"partitions"`
	Offline         int          `json:"offlinePartitions"`
	UnderReplicated int          `json:"underReplicatedPartitions"`
	LocalPartitions int          `json:"localPartitions"`
	DiskUsage       int64        `json:"diskUsageBytes"`
	DiskFree        int64        `json:"diskFreeBytes"` // 0: unknown
	DiskFull        bool         `json:"diskFull"`
	Mirrors         int          `json:"mirrors"`
	Alarms          []string     `json:"alarms"`
	Time            int64        `json:"time"`
}

type brokerView struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
	Rack string `json:"rack,omitempty"`
}

func (c *Console) cluster(ctx context.Context) any {
	img := c.b.Metadata().Image()
	v := clusterView{ClusterID: img.ClusterID, NodeID: c.b.NodeID(), ControllerID: img.ControllerID,
		Brokers: []brokerView{}, Alarms: []string{}, Mirrors: len(img.Mirrors), Time: time.Now().UnixMilli()}
	for _, id := range slices.Sorted(maps.Keys(img.Brokers)) {
		br := img.Brokers[id]
		v.Brokers = append(v.Brokers, brokerView{ID: br.ID, Host: br.Host, Port: br.Port, Rack: br.Rack})
	}
	for _, t := range img.Topics {
		v.Topics++
		for _, p := range t.Partitions {
			v.Partitions++
			if p.Leader < 0 {
				v.Offline++
			}
			if len(p.ISR) < len(p.Replicas) {
				v.UnderReplicated++
			}
		}
	}
	st := c.b.Engine().Metrics()
	v.LocalPartitions, v.DiskUsage, v.DiskFree, v.DiskFull = st.Partitions, int64(st.DiskUsage), int64(st.DiskFree), st.DiskFull
	if st.DiskFull {
		v.Alarms = append(v.Alarms, "the data directory is full: client writes are refused")
	}
	if v.Offline > 0 {
		v.Alarms = append(v.Alarms, fmt.Sprintf("%d partitions have no leader", v.Offline))
	}
	if v.UnderReplicated > 0 {
		v.Alarms = append(v.Alarms, fmt.Sprintf("%d partitions are under-replicated", v.UnderReplicated))
	}
	if d, ok := plugin.Find[plugin.MirrorDescriber](c.b.Plugins()); ok {
		for _, m := range d.DescribeMirrors(ctx) {
			if m.State == "FAILED" {
				v.Alarms = append(v.Alarms, fmt.Sprintf("mirror %s failed: %s", m.Name, m.Error))
			}
			failed, unsafe := 0, 0
			for _, p := range m.Partitions {
				if p.State == "FAILED" {
					failed++
				}
				if p.DestinationIssue != "" {
					unsafe++
				}
			}
			if failed > 0 {
				v.Alarms = append(v.Alarms, fmt.Sprintf("mirror %s: %d partitions FAILED", m.Name, failed))
			}
			if unsafe > 0 {
				v.Alarms = append(v.Alarms, fmt.Sprintf("mirror %s: %d partitions here have no leader or fewer in-sync replicas than min.insync.replicas", m.Name, unsafe))
			}
		}
	}
	return v
}

type topicView struct {
	Name       string          `json:"name"`
	ID         string          `json:"id"`
	Internal   bool            `json:"internal"`
	Mirror     string          `json:"mirror,omitempty"` // the mirror copying it: read-only
	Partitions []partitionView `json:"partitions"`
}

type partitionView struct {
	Partition     int32   `json:"partition"`
	Leader        int32   `json:"leader"`
	LeaderEpoch   int32   `json:"leaderEpoch"`
	Replicas      []int32 `json:"replicas"`
	ISR           []int32 `json:"isr"`
	LogStart      int64   `json:"logStart"`
	HighWatermark int64   `json:"highWatermark"`
	LogEnd        int64   `json:"logEnd"`
}

func (c *Console) topics(context.Context) any {
	img := c.b.Metadata().Image()
	out := []topicView{}
	for _, name := range slices.Sorted(maps.Keys(img.Topics)) {
		t := img.Topics[name]
		tv := topicView{Name: name, ID: t.ID.String(), Internal: t.Internal || strings.HasPrefix(name, "__"),
			Mirror: img.MirrorOf(name), Partitions: []partitionView{}}
		for i, p := range t.Partitions {
			pv := partitionView{Partition: int32(i), Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: p.Replicas, ISR: p.ISR, LogStart: -1, HighWatermark: -1, LogEnd: -1}
			if o, ok := c.offsets(t, int32(i)); ok {
				pv.LogStart, pv.HighWatermark, pv.LogEnd = o.LogStart, o.HighWatermark, o.LogEnd
			}
			tv.Partitions = append(tv.Partitions, pv)
		}
		out = append(out, tv)
	}
	return out
}

// offsets are a partition's offsets if this broker hosts it.
func (c *Console) offsets(t *metadata.Topic, partition int32) (engine.Offsets, bool) {
	ep := c.b.Engine().Partition(engine.TopicID(t.ID), partition)
	if ep == nil {
		return engine.Offsets{}, false
	}
	return ep.Offsets(), true
}

type groupView struct {
	Name         string                   `json:"name"`
	State        string                   `json:"state"`
	ProtocolType string                   `json:"protocolType"`
	Protocol     string                   `json:"protocol"`
	Generation   int32                    `json:"generation"`
	Members      []plugin.GroupMemberView `json:"members"`
	Partitions   []groupPartition         `json:"partitions"`
	Lag          int64                    `json:"lag"` // -1 when some partition's is unknown
}

type groupPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"`
	End       int64  `json:"end"` // the high watermark, -1 unknown
	Lag       int64  `json:"lag"` // -1 unknown
}

func (c *Console) groups(ctx context.Context) any {
	out := []groupView{}
	d, ok := plugin.Find[plugin.GroupDescriber](c.b.Plugins())
	if !ok {
		return out
	}
	img := c.b.Metadata().Image()
	for _, g := range d.DescribeGroups(ctx) {
		gv := groupView{Name: g.Name, State: g.State, ProtocolType: g.ProtocolType, Protocol: g.Protocol,
			Generation: g.Generation, Members: g.Members, Partitions: []groupPartition{}}
		if gv.Members == nil {
			gv.Members = []plugin.GroupMemberView{}
		}
		tps := slices.SortedFunc(maps.Keys(g.Offsets), func(a, b plugin.TopicPartition) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return int(a.Partition - b.Partition)
		})
		for _, tp := range tps {
			gp := groupPartition{Topic: tp.Topic, Partition: tp.Partition, Committed: g.Offsets[tp].Offset, End: -1, Lag: -1}
			if t := img.Topics[tp.Topic]; t != nil {
				if o, ok := c.offsets(t, tp.Partition); ok {
					gp.End, gp.Lag = o.HighWatermark, max(0, o.HighWatermark-gp.Committed)
				}
			}
			gv.Lag = addLag(gv.Lag, gp.Lag)
			gv.Partitions = append(gv.Partitions, gp)
		}
		out = append(out, gv)
	}
	return out
}

// addLag sums lags, unknown (-1) if either is.
func addLag(sum, lag int64) int64 {
	if sum < 0 || lag < 0 {
		return -1
	}
	return sum + lag
}

type mirrorView struct {
	plugin.MirrorView
	RPO     rpo     `json:"rpo"`
	History []point `json:"history"`
}

// rpo is what a failover of the mirror would give up now: the records
// its partitions are behind their source and the largest lag in record
// time; -1 when a partition's lag is unknown (its source end offset
// never learned). A paused partition counts: its source is still
// followed, so its lag grows while it is paused. Known is false when a
// partition's source end offset is not current (plugin
// MirrorPartitionView.SourceStale: the source unreachable or silent):
// Records and Ms are then lower bounds, as of AsOf, the oldest time a
// source end offset among them was learned (Unix ms).
type rpo struct {
	Records int64 `json:"records"`
	Ms      int64 `json:"ms"`
	Known   bool  `json:"known"`
	AsOf    int64 `json:"asOf"`
}

func rpoOf(parts []plugin.MirrorPartitionView) rpo {
	r := rpo{Known: true}
	for _, p := range parts {
		switch p.State {
		case "STOPPING", "STOPPED": // failed over already
			continue
		}
		r.Records = addLag(r.Records, p.Lag)
		if r.Ms >= 0 && p.LagMs >= 0 {
			r.Ms = max(r.Ms, p.LagMs)
		} else {
			r.Ms = -1
		}
		if p.SourceStale {
			r.Known = false
		}
		if p.SourceOffsetTime > 0 && (r.AsOf == 0 || p.SourceOffsetTime < r.AsOf) {
			r.AsOf = p.SourceOffsetTime
		}
	}
	r.Known = r.Known && r.Records >= 0 && r.Ms >= 0
	return r
}

func (c *Console) mirrors(ctx context.Context) any {
	out := []mirrorView{}
	d, ok := plugin.Find[plugin.MirrorDescriber](c.b.Plugins())
	if !ok {
		return out
	}
	for _, m := range d.DescribeMirrors(ctx) {
		if m.Partitions == nil {
			m.Partitions = []plugin.MirrorPartitionView{}
		}
		if m.Diverged == nil {
			m.Diverged = []plugin.DivergedView{}
		}
		r := rpoOf(m.Partitions)
		// The chart ends with the value shown now, sampled or not.
		h := append(c.historyOf(m.Name), point{Time: time.Now().UnixMilli(), Records: r.Records, Ms: r.Ms})
		out = append(out, mirrorView{MirrorView: m, RPO: r, History: h})
	}
	return out
}
