package admin

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// HandleDescribeLogDirs answers the broker's one log dir, its data dir,
// with the size of each partition it hosts: of those named, or of all
// when none are. It needs DESCRIBE on the cluster; as in Kafka, a
// principal without it gets no dirs (and, from v3, the error).
func (a *Admin) HandleDescribeLogDirs(_ context.Context, rc *plugin.RequestContext, req *kmsg.DescribeLogDirsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterName) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil
	}
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = a.DataDir
	if abs, err := filepath.Abs(a.DataDir); err == nil {
		dir.Dir = abs
	}
	if total, avail, ok := a.Engine.Disk(); ok {
		dir.TotalBytes, dir.UsableBytes = total, avail
	}
	var wanted map[string][]int32 // nil: every partition
	if req.Topics != nil {
		wanted = make(map[string][]int32, len(req.Topics))
		for _, t := range req.Topics {
			wanted[t.Topic] = append(wanted[t.Topic], t.Partitions...)
		}
	}
	img := a.Image()
	byTopic := map[string]int{}
	for _, sp := range a.Engine.Stored() {
		t := img.TopicsByID[sp.TopicID]
		if t == nil {
			continue // being deleted
		}
		if wanted != nil && !slices.Contains(wanted[t.Name], sp.Partition) {
			continue
		}
		p := a.Engine.Partition(sp.TopicID, sp.Partition)
		if p == nil {
			continue
		}
		i, ok := byTopic[t.Name]
		if !ok {
			i = len(dir.Topics)
			byTopic[t.Name] = i
			rt := kmsg.NewDescribeLogDirsResponseDirTopic()
			rt.Topic = t.Name
			dir.Topics = append(dir.Topics, rt)
		}
		rp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
		rp.Partition, rp.Size = sp.Partition, p.Size()
		dir.Topics[i].Partitions = append(dir.Topics[i].Partitions, rp)
	}
	resp.Dirs = append(resp.Dirs, dir)
	return resp, nil
}
