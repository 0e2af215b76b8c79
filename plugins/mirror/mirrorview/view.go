// Package mirrorview holds what every view of a mirror may claim
// (DescribeMirrors, and through it tandem mirrors --describe and --json,
// the console, a failover's report; /healthz and /metrics from the same
// state): the rules live here, once, so that no two views disagree. Its
// functions are pure; the plugin passes in what its run knows.
package mirrorview

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// NeedsSource reports whether a partition in state s has a source side:
// one being prepared, copied or paused.
func NeedsSource(s mirrorstate.State) bool {
	switch s {
	case mirrorstate.Preparing, mirrorstate.Mirroring, mirrorstate.EpochFencing, mirrorstate.Pausing, mirrorstate.Paused:
		return true
	}
	return false
}

// CutOffState is the same rule for a state by name, when the mirror's
// source fails it: what a broker that does not lead the partition shows.
func CutOffState(name string) bool {
	switch name {
	case mirrorstate.Preparing.String(), mirrorstate.Mirroring.String(), mirrorstate.EpochFencing.String():
		return true
	}
	return false
}

// StaleReason is the REASON of a partition whose source end offset is
// not current though nothing failed yet (a source that stopped
// answering, before its requests time out).
func StaleReason(at time.Time) string {
	return "the source's end offset was last learned at " + at.UTC().Format(time.RFC3339)
}

// MinISR is min.insync.replicas for partition i of t as its leader
// checks acks=all: the topic's, else the leader's dynamic broker
// config, the cluster's, def (this broker's static property).
func MinISR(img *metadata.Image, t *metadata.Topic, leader int32, def int) int {
	const key = "min.insync.replicas"
	v, ok := t.Configs[key]
	if !ok {
		v, ok = img.NodeConfigs[leader][key]
	}
	if !ok {
		v, ok = img.BrokerConfigs[key]
	}
	if n, err := strconv.Atoi(v); ok && err == nil && n > 0 {
		return n
	}
	return max(1, def)
}

// DestinationIssue says why partition i of t on this (the destination)
// cluster does not hold its copy safely: it has no leader, so nothing is
// copied and nothing can be read, or its ISR is below
// min.insync.replicas, so one more failure may lose what was copied and
// a failover's acks=all producers would be refused. "" when neither.
func DestinationIssue(img *metadata.Image, t *metadata.Topic, i int32, def int) string {
	if int(i) >= len(t.Partitions) {
		return ""
	}
	part := t.Partitions[i]
	if part.Leader < 0 {
		return fmt.Sprintf("destination partition has no leader (replicas %v)", part.Replicas)
	}
	if n := MinISR(img, t, part.Leader, def); len(part.ISR) < n {
		return fmt.Sprintf("destination ISR %v is below min.insync.replicas %d (replicas %v)", part.ISR, n, part.Replicas)
	}
	return ""
}

// Destination health, as tandem_mirror_destination_partitions labels it.
const (
	HealthOK          = "ok"
	HealthNoLeader    = "no_leader"
	HealthUnderMinISR = "under_min_isr"
)

// DestinationHealth is DestinationIssue as a label.
func DestinationHealth(img *metadata.Image, t *metadata.Topic, i int32, def int) string {
	part := t.Partitions[i]
	switch {
	case part.Leader < 0:
		return HealthNoLeader
	case len(part.ISR) < MinISR(img, t, part.Leader, def):
		return HealthUnderMinISR
	}
	return HealthOK
}

// MirrorState is a mirror's state as every view shows it: STOPPED once
// every partition failed over (its source no longer matters), FAILED
// while the source fails it (unreachable, another cluster), PAUSED when
// every partition still mirrored is paused, else MIRRORING. A mirror
// without partitions is MIRRORING, or FAILED.
func MirrorState(failed bool, parts []mirrorproto.PartitionDetail) string {
	live, paused := 0, 0
	for _, pd := range parts {
		switch pd.State {
		case mirrorstate.Stopped.String():
			continue
		case mirrorstate.Paused.String():
			paused++
		}
		live++
	}
	switch {
	case len(parts) > 0 && live == 0:
		return mirrorstate.Stopped.String()
	case failed:
		return mirrorstate.Failed.String()
	case live > 0 && paused == live:
		return mirrorstate.Paused.String()
	}
	return mirrorstate.Mirroring.String()
}

// StateNeedsSource is NeedsSource for a state's name.
func StateNeedsSource(name string) bool {
	for s := mirrorstate.Preparing; s <= mirrorstate.Failed; s++ {
		if s.String() == name {
			return NeedsSource(s)
		}
	}
	return false
}

// DestinationCounts counts the partitions of a mirror's topics (failed
// over ones included, as DescribeMirrors lists them) by
// DestinationHealth.
func DestinationCounts(img *metadata.Image, mirror string, def int) map[string]int {
	out := map[string]int{}
	if img == nil || img.Mirrors[mirror] == nil {
		return out
	}
	for name := range img.Mirrors[mirror].Topics {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			out[DestinationHealth(img, t, int32(i), def)]++
		}
	}
	return out
}

// WithLeaderView completes pd, a partition as this broker sees it (its
// state the coordinator's), with rd, its leader's view of the source
// side (led: another broker leads it), and shows it FAILED when it is
// cut off from its source: its leader here or there says so (cut, or
// rd FAILED), or the mirror cannot use its source (failed, mirrorErr),
// whose reason is then the mirror's, one for every partition rather
// than what each leader's dial saw.
func WithLeaderView(pd, rd mirrorproto.PartitionDetail, led, cut, failed bool, mirrorErr *string) mirrorproto.PartitionDetail {
	coordinated := pd.State
	if led {
		pd.SourceOffset, pd.SourceOffsetTime, pd.DestinationOffset = rd.SourceOffset, rd.SourceOffsetTime, rd.DestinationOffset
		pd.Lag, pd.LagMs, pd.SourceStale = rd.Lag, rd.LagMs, rd.SourceStale
		if pd.Reason == "" {
			pd.Reason = rd.Reason
		}
		cut = cut || rd.State == mirrorstate.Failed.String()
	}
	if failed && StateNeedsSource(coordinated) {
		// Nothing the mirror learned of its source is the source's state
		// now.
		pd.SourceStale = pd.SourceOffset >= 0
		if mirrorErr != nil && (pd.Reason == "" || CutOffState(coordinated)) {
			pd.Reason = *mirrorErr
		}
		cut = true
	}
	if cut && CutOffState(coordinated) {
		pd.State = mirrorstate.Failed.String()
	}
	return pd
}

// SourceNames sets the source names of the manifest entries of mirror m
// whose topics are named otherwise on the source.
func SourceNames(m *metadata.Mirror, entries []mirrorproto.DivergedRange) {
	for i := range entries {
		if mt, ok := m.Topics[entries[i].Topic]; ok && mt.SourceName(entries[i].Topic) != entries[i].Topic {
			entries[i].SourceTopic = mt.SourceName(entries[i].Topic)
		}
	}
}
