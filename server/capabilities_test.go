package server

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// TestMissingCapability: properties that ask for what only a plugin
// provides make New fail, naming the property, when no plugin provides it
// (an authorizer that is silently off let any user produce and consume),
// and pass when one does.
func TestMissingCapability(t *testing.T) {
	sasl := map[string]string{"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "tandem.sasl.plain.users": "admin:pw"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range sasl {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		props    map[string]string
		named    []string // the keys the error names
		provider any      // a plugin that provides what they ask for
	}{
		{map[string]string{"authorizer.class.name": "StandardAuthorizer", "super.users": "User:admin"},
			[]string{"authorizer.class.name", "super.users"}, struct {
				plugin.Authorizer
				plugin.ACLStore
			}{}},
		{map[string]string{"super.users": "User:admin"}, []string{"super.users"}, struct{ plugin.ACLStore }{}},
		{map[string]string{"allow.everyone.if.no.acl.found": "true"}, []string{"allow.everyone.if.no.acl.found"}, struct{ plugin.ACLStore }{}},
		{with(map[string]string{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}), []string{"sasl.enabled.mechanisms"}, scramAPI{}},
		{with(map[string]string{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "scram-sha-256"}),
			[]string{"listener.name.sasl_plaintext.sasl.enabled.mechanisms"}, scramAPI{}},
		{map[string]string{"mirror.topics.include": ".*"}, []string{"mirror.topics.include"}, owner("mirror.")},
		{map[string]string{"transaction.max.timeout.ms": "60000"}, []string{"transaction.max.timeout.ms"}, owner("transaction.")},
		{map[string]string{"offsets.topic.num.partitions": "4"}, []string{"offsets.topic.num.partitions"}, owner("offsets.")},
		{map[string]string{"group.initial.rebalance.delay.ms": "0"}, []string{"group.initial.rebalance.delay.ms"}, owner("group.")},
	} {
		_, err := New(Config{DataDir: t.TempDir(), Props: tc.props})
		if err == nil {
			t.Errorf("%v without a plugin: New succeeded", tc.props)
			continue
		}
		for _, k := range tc.named {
			if !strings.Contains(err.Error(), k) {
				t.Errorf("%v without a plugin: error %q does not name %s", tc.props, err, k)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error %q is more than one line", err)
		}
		if _, err := New(Config{DataDir: t.TempDir(), Props: tc.props, Plugins: []any{tc.provider}}); err != nil {
			t.Errorf("%v with %T: %v", tc.props, tc.provider, err)
		}
	}
	// Empty values ask for nothing; PLAIN needs no plugin.
	if _, err := New(Config{DataDir: t.TempDir(), Props: with(map[string]string{"authorizer.class.name": "", "sasl.enabled.mechanisms": "PLAIN"})}); err != nil {
		t.Fatal(err)
	}
}

type owner string

func (o owner) OwnsProp(k string) bool { return strings.HasPrefix(k, string(o)) }

// scramAPI serves AlterUserScramCredentials, as the ACL plugin does.
type scramAPI struct{}

func (scramAPI) APIs() []plugin.API {
	return []plugin.API{plugin.Handle(kmsg.AlterUserSCRAMCredentials, 0, 0, func(context.Context, *RequestContext, *kmsg.AlterUserSCRAMCredentialsRequest) (kmsg.Response, error) {
		return nil, nil
	})}
}
