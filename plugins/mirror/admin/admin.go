// Package admin is a Go client for Tandem's cluster mirroring APIs: the
// Admin methods of KIP-1279 (createMirror, addTopicsToMirror,
// removeTopicsFromMirror, listMirrors, describeMirrors) plus pause,
// resume and delete, over a franz-go client.
package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// Client sends mirror requests through a franz-go client to the
// destination cluster.
type Client struct{ cl *kgo.Client }

// New wraps cl; closing cl is the caller's business. cl must be built
// with Opt (franz-go refuses the mirror API keys otherwise).
func New(cl *kgo.Client) *Client { return &Client{cl: cl} }

// Opt lets a franz-go client send the mirror requests.
func Opt() kgo.Opt { return kgo.MaxVersions(mirrorproto.ClientVersions()) }

// Error is an error a broker answered a mirror request with: a Kafka
// error code (errors.Is works on it) and the broker's message.
type Error struct {
	Code    *kerr.Error
	Message string // the broker's, often naming the code already
}

func (e *Error) Error() string {
	switch {
	case e.Message == "":
		return e.Code.Error()
	case strings.Contains(e.Message, e.Code.Message):
		return e.Message
	}
	return e.Message + " (" + e.Code.Message + ")"
}

func (e *Error) Unwrap() error { return e.Code }

// ErrorOf turns an error code and message of a response into an error
// (nil for code 0).
func ErrorOf(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	e := &Error{Code: kerr.UnknownServerError}
	errors.As(mirrorproto.ErrorForCode(code), &e.Code)
	if msg != nil {
		e.Message = *msg
	}
	return e
}

// ErrUnsupported is returned by Supported for a broker without the mirror
// APIs.
var ErrUnsupported = errors.New("this broker does not support Cluster Mirroring (API 98 not advertised)")

// Supported returns nil if the broker serves the mirror APIs, and
// ErrUnsupported if it does not advertise them (ListMirrors, 98).
func (c *Client) Supported(ctx context.Context) error {
	resp, err := c.do(ctx, kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		return err
	}
	for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
		if k.ApiKey == mirrorproto.KeyListMirrors {
			return nil
		}
	}
	return ErrUnsupported
}

func (c *Client) do(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	resp, err := c.cl.Request(ctx, req)
	if err != nil {
		// Named in words: the mirror keys are not Kafka's, and no one
		// reads "request 98".
		return nil, fmt.Errorf("%s: %w", strings.TrimSuffix(reflect.TypeOf(req).Elem().Name(), "Request"), err)
	}
	return resp, nil
}

// CreateMirror defines a mirror with its configs (bootstrap.servers of the
// source, security settings, ...).
func (c *Client) CreateMirror(ctx context.Context, name string, configs map[string]string) error {
	req := &mirrorproto.CreateMirrorRequest{MirrorName: &name}
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		v := configs[k]
		req.Configs = append(req.Configs, mirrorproto.MirrorConfig{Name: k, Value: &v})
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	r := resp.(*mirrorproto.CreateMirrorResponse)
	return ErrorOf(r.ErrorCode, r.ErrorMessage)
}

// AddTopicsToMirror adds topics (topic → mirror name), all or none.
func (c *Client) AddTopicsToMirror(ctx context.Context, topicToMirror map[string]string) error {
	_, err := c.addTopics(ctx, topicToMirror, false)
	return err
}

// PlanAddTopics is AddTopicsToMirror validated against both clusters but
// not done: it returns what truncation would remove from topics that
// exist here with records (a failback).
func (c *Client) PlanAddTopics(ctx context.Context, topicToMirror map[string]string) ([]mirrorproto.Truncation, error) {
	return c.addTopics(ctx, topicToMirror, true)
}

func (c *Client) addTopics(ctx context.Context, topicToMirror map[string]string, validateOnly bool) ([]mirrorproto.Truncation, error) {
	var topics []mirrorproto.AddTopic
	for _, t := range slices.Sorted(maps.Keys(topicToMirror)) {
		m := topicToMirror[t]
		topics = append(topics, mirrorproto.AddTopic{TopicName: t, MirrorName: &m})
	}
	return c.AddTopics(ctx, topics, validateOnly)
}

// AddTopics is AddTopicsToMirror with each topic as given: a
// DestinationName names the topic here when it is not what the mirror's
// mirror.topic.prefix makes of the source's name (a failback of a
// prefixed topic). validateOnly only returns the truncation plan.
func (c *Client) AddTopics(ctx context.Context, topics []mirrorproto.AddTopic, validateOnly bool) ([]mirrorproto.Truncation, error) {
	req := &mirrorproto.AddTopicsToMirrorRequest{ValidateOnly: validateOnly, Topics: topics}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	r := resp.(*mirrorproto.AddTopicsToMirrorResponse)
	return r.Truncations, ErrorOf(r.ErrorCode, r.ErrorMessage)
}

// RemoveTopicsFromMirror stops mirroring topics (names are anchored
// regular expressions): they fail over and become writable. It returns
// the broker's summary ("Removed N topic(s) ...").
func (c *Client) RemoveTopicsFromMirror(ctx context.Context, name string, topics []string) (string, error) {
	req := &mirrorproto.RemoveTopicsFromMirrorRequest{MirrorName: name}
	for _, t := range topics {
		req.Topics = append(req.Topics, mirrorproto.RemoveTopic{TopicName: t})
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return "", err
	}
	r := resp.(*mirrorproto.RemoveTopicsFromMirrorResponse)
	if err := ErrorOf(r.ErrorCode, r.ErrorMessage); err != nil {
		return "", err
	}
	if r.ErrorMessage != nil {
		return *r.ErrorMessage, nil
	}
	return "", nil
}

// FailoverOptions shape Failover.
type FailoverOptions struct {
	// Force stops the topics even when the source cannot confirm that
	// nothing would be lost (it is unreachable) or the timeout is over.
	Force bool
	// Timeout bounds the wait for lag 0 (the broker's request timeout
	// when 0).
	Timeout time.Duration
	// Consistent fails the topics over at one consistent cut: one
	// source time for all their partitions, no transaction split, group
	// offsets clamped to the cut; what lies beyond it goes to the
	// divergence quarantine (FailoverPartition's Cut fields say how much).
	Consistent bool
}

// Failover is a safe promote: the broker waits until every partition of
// topics (anchored regular expressions) has lag 0 against a source end
// offset learned after the call, then stops them; it refuses, naming the
// partitions, when the source is unreachable or the timeout passes,
// unless Force. It returns where each partition was left: with Force,
// the lag given up.
func (c *Client) Failover(ctx context.Context, name string, topics []string, o FailoverOptions) ([]mirrorproto.FailoverPartition, error) {
	req := &mirrorproto.RemoveTopicsFromMirrorRequest{MirrorName: name, Mode: mirrorproto.FailoverSafe, TimeoutMs: int32(o.Timeout.Milliseconds()), Consistent: o.Consistent}
	if o.Force {
		req.Mode = mirrorproto.FailoverForce
	}
	for _, t := range topics {
		req.Topics = append(req.Topics, mirrorproto.RemoveTopic{TopicName: t})
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	r := resp.(*mirrorproto.RemoveTopicsFromMirrorResponse)
	return r.Failover, ErrorOf(r.ErrorCode, r.ErrorMessage)
}

// ListMirrors lists the mirrors.
func (c *Client) ListMirrors(ctx context.Context) ([]mirrorproto.ListedMirror, error) {
	resp, err := c.do(ctx, &mirrorproto.ListMirrorsRequest{})
	if err != nil {
		return nil, err
	}
	r := resp.(*mirrorproto.ListMirrorsResponse)
	return r.Mirrors, ErrorOf(r.ErrorCode, nil)
}

// DescribeMirrors describes mirrors (all if names is empty).
func (c *Client) DescribeMirrors(ctx context.Context, names ...string) ([]mirrorproto.DescribedMirror, error) {
	resp, err := c.do(ctx, &mirrorproto.DescribeMirrorsRequest{MirrorNames: names})
	if err != nil {
		return nil, err
	}
	return resp.(*mirrorproto.DescribeMirrorsResponse).Mirrors, nil
}

func (c *Client) topicsOp(ctx context.Context, req *mirrorproto.MirrorTopicsRequest, name string, topics []string) error {
	req.MirrorName, req.Topics = name, topics
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	r := resp.(*mirrorproto.MirrorTopicsResponse)
	return ErrorOf(r.ErrorCode, r.ErrorMessage)
}

// PauseMirror pauses topics of a mirror (all if none are named).
func (c *Client) PauseMirror(ctx context.Context, name string, topics ...string) error {
	return c.topicsOp(ctx, mirrorproto.NewPauseMirrorTopicsRequest(), name, topics)
}

// ResumeMirror resumes topics of a mirror (all if none are named).
func (c *Client) ResumeMirror(ctx context.Context, name string, topics ...string) error {
	return c.topicsOp(ctx, mirrorproto.NewResumeMirrorTopicsRequest(), name, topics)
}

// DeleteMirror stops every topic of a mirror and deletes it.
func (c *Client) DeleteMirror(ctx context.Context, name string) error {
	return c.topicsOp(ctx, mirrorproto.NewDeleteMirrorRequest(), name, nil)
}

// MirrorConfig is one config of a mirror as the broker describes it; a
// secret has a nil Value.
type MirrorConfig struct {
	Name      string
	Value     *string
	Sensitive bool
}

// DescribeMirrorConfigs returns a mirror's configs (the MIRROR config
// resource, type 64).
func (c *Client) DescribeMirrorConfigs(ctx context.Context, name string) ([]MirrorConfig, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = mirrorResource, name
	req.Resources = append(req.Resources, r)
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	res := resp.(*kmsg.DescribeConfigsResponse).Resources
	if len(res) != 1 {
		return nil, fmt.Errorf("describe configs of mirror %s: %d resources in the answer", name, len(res))
	}
	if err := ErrorOf(res[0].ErrorCode, res[0].ErrorMessage); err != nil {
		return nil, err
	}
	out := make([]MirrorConfig, len(res[0].Configs))
	for i, cf := range res[0].Configs {
		out[i] = MirrorConfig{Name: cf.Name, Value: cf.Value, Sensitive: cf.IsSensitive}
	}
	return out, nil
}

// AlterMirrorConfigs sets and deletes configs of a mirror, all or none;
// the broker validates the result.
func (c *Client) AlterMirrorConfigs(ctx context.Context, name string, set map[string]string, del []string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = mirrorResource, name
	for _, k := range slices.Sorted(maps.Keys(set)) {
		cf := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cf.Name, cf.Value = k, kmsg.StringPtr(set[k])
		r.Configs = append(r.Configs, cf)
	}
	for _, k := range del {
		cf := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cf.Name, cf.Op = k, kmsg.IncrementalAlterConfigOpDelete
		r.Configs = append(r.Configs, cf)
	}
	req.Resources = append(req.Resources, r)
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	rr := resp.(*kmsg.IncrementalAlterConfigsResponse).Resources
	if len(rr) != 1 {
		return fmt.Errorf("alter configs of mirror %s: %d resources in the answer", name, len(rr))
	}
	return ErrorOf(rr[0].ErrorCode, rr[0].ErrorMessage)
}

// mirrorResource is KIP-1279's MIRROR config resource type.
const mirrorResource = kmsg.ConfigResourceType(64)

// LastMirroredOffsets returns, per topic and partition, the last mirrored
// offset and the last mirror epoch.
func (c *Client) LastMirroredOffsets(ctx context.Context, name string, topics map[string][]int32) ([]mirrorproto.OffsetsTopic, error) {
	req := &mirrorproto.LastMirroredOffsetsRequest{MirrorName: name}
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		req.Topics = append(req.Topics, mirrorproto.PartitionsTopic{Name: t, Partitions: topics[t]})
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	r := resp.(*mirrorproto.LastMirroredOffsetsResponse)
	return r.Topics, ErrorOf(r.ErrorCode, nil)
}
