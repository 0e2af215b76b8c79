// Package admin is a Go client for Tandem's cluster mirroring APIs: the
// Admin methods of KIP-1279 (createMirror, addTopicsToMirror,
// removeTopicsFromMirror, listMirrors, describeMirrors) plus pause,
// resume and delete, over a franz-go client.
package admin

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror"
)

// Client sends mirror requests through a franz-go client to the
// destination cluster.
type Client struct{ cl *kgo.Client }

// New wraps cl; closing cl is the caller's business. cl must be built
// with Opt (franz-go refuses the mirror API keys otherwise).
func New(cl *kgo.Client) *Client { return &Client{cl: cl} }

// Opt lets a franz-go client send the mirror requests.
func Opt() kgo.Opt { return kgo.MaxVersions(mirror.ClientVersions()) }

// errOf turns a response's error code and message into an error.
func errOf(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	err := mirror.ErrorForCode(code)
	if msg != nil && *msg != "" {
		return fmt.Errorf("%s: %w", *msg, err)
	}
	return err
}

func (c *Client) do(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	resp, err := c.cl.Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("mirror request %d: %w", req.Key(), err)
	}
	return resp, nil
}

// CreateMirror defines a mirror with its configs (bootstrap.servers of the
// source, security settings, ...).
func (c *Client) CreateMirror(ctx context.Context, name string, configs map[string]string) error {
	req := &mirror.CreateMirrorRequest{MirrorName: &name}
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		v := configs[k]
		req.Configs = append(req.Configs, mirror.MirrorConfig{Name: k, Value: &v})
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	r := resp.(*mirror.CreateMirrorResponse)
	return errOf(r.ErrorCode, r.ErrorMessage)
}

// AddTopicsToMirror adds topics (topic → mirror name), all or none.
func (c *Client) AddTopicsToMirror(ctx context.Context, topicToMirror map[string]string) error {
	req := &mirror.AddTopicsToMirrorRequest{}
	for _, t := range slices.Sorted(maps.Keys(topicToMirror)) {
		m := topicToMirror[t]
		req.Topics = append(req.Topics, mirror.AddTopic{TopicName: t, MirrorName: &m})
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	r := resp.(*mirror.AddTopicsToMirrorResponse)
	return errOf(r.ErrorCode, r.ErrorMessage)
}

// RemoveTopicsFromMirror stops mirroring topics (names are anchored
// regular expressions): they fail over and become writable. It returns
// the broker's summary ("Removed N topic(s) ...").
func (c *Client) RemoveTopicsFromMirror(ctx context.Context, name string, topics []string) (string, error) {
	req := &mirror.RemoveTopicsFromMirrorRequest{MirrorName: name}
	for _, t := range topics {
		req.Topics = append(req.Topics, mirror.RemoveTopic{TopicName: t})
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return "", err
	}
	r := resp.(*mirror.RemoveTopicsFromMirrorResponse)
	if err := errOf(r.ErrorCode, r.ErrorMessage); err != nil {
		return "", err
	}
	if r.ErrorMessage != nil {
		return *r.ErrorMessage, nil
	}
	return "", nil
}

// ListMirrors lists the mirrors.
func (c *Client) ListMirrors(ctx context.Context) ([]mirror.ListedMirror, error) {
	resp, err := c.do(ctx, &mirror.ListMirrorsRequest{})
	if err != nil {
		return nil, err
	}
	r := resp.(*mirror.ListMirrorsResponse)
	return r.Mirrors, errOf(r.ErrorCode, nil)
}

// DescribeMirrors describes mirrors (all if names is empty).
func (c *Client) DescribeMirrors(ctx context.Context, names ...string) ([]mirror.DescribedMirror, error) {
	resp, err := c.do(ctx, &mirror.DescribeMirrorsRequest{MirrorNames: names})
	if err != nil {
		return nil, err
	}
	return resp.(*mirror.DescribeMirrorsResponse).Mirrors, nil
}

func (c *Client) topicsOp(ctx context.Context, req *mirror.MirrorTopicsRequest, name string, topics []string) error {
	req.MirrorName, req.Topics = name, topics
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	r := resp.(*mirror.MirrorTopicsResponse)
	return errOf(r.ErrorCode, r.ErrorMessage)
}

// PauseMirror pauses topics of a mirror (all if none are named).
func (c *Client) PauseMirror(ctx context.Context, name string, topics ...string) error {
	return c.topicsOp(ctx, mirror.NewPauseMirrorTopicsRequest(), name, topics)
}

// ResumeMirror resumes topics of a mirror (all if none are named).
func (c *Client) ResumeMirror(ctx context.Context, name string, topics ...string) error {
	return c.topicsOp(ctx, mirror.NewResumeMirrorTopicsRequest(), name, topics)
}

// DeleteMirror stops every topic of a mirror and deletes it.
func (c *Client) DeleteMirror(ctx context.Context, name string) error {
	return c.topicsOp(ctx, mirror.NewDeleteMirrorRequest(), name, nil)
}

// LastMirroredOffsets returns, per topic and partition, the last mirrored
// offset and the last mirror epoch.
func (c *Client) LastMirroredOffsets(ctx context.Context, name string, topics map[string][]int32) ([]mirror.OffsetsTopic, error) {
	req := &mirror.LastMirroredOffsetsRequest{MirrorName: name}
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		req.Topics = append(req.Topics, mirror.PartitionsTopic{Name: t, Partitions: topics[t]})
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	r := resp.(*mirror.LastMirroredOffsetsResponse)
	return r.Topics, errOf(r.ErrorCode, nil)
}
