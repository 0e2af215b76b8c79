//go:build !tandem_omit_acl

package main

import (
	"context"
	"strings"

	"github.com/tandem-kafka/tandem/plugins/acl"
	"github.com/tandem-kafka/tandem/server"
)

// withACL adds the security plugin: the ACL, SCRAM-credential and
// client-quota APIs always, and the authorizer when authorizer.class.name
// is set (to any value, e.g. Kafka's
// org.apache.kafka.metadata.authorizer.StandardAuthorizer), as Kafka turns
// authorization on. SASL, TLS and quota enforcement are the server's.
func withACL(ps []any, props map[string]string) []any {
	p, err := acl.New(props)
	if err != nil {
		return append(ps, failedPlugin{err})
	}
	ps = append(ps, p)
	if strings.TrimSpace(props["authorizer.class.name"]) != "" {
		ps = append(ps, p.Authorizer())
	}
	return ps
}

// failedPlugin fails the broker's start with a plugin's configuration
// error, so that a bad property stops tandem serve with a clear message.
type failedPlugin struct{ err error }

func (f failedPlugin) Start(context.Context, server.Host) error { return f.err }
func (f failedPlugin) Stop(context.Context) error               { return nil }
