// Package builtin names the plugins compiled into a Tandem build: consumer
// groups, share groups, transactions, ACLs with SCRAM credentials and
// quotas, and mirroring. The root package's tandem.Plugins and
// tandem.NewBroker are its public face.
//
// Each plugin is added by a with<Plugin> function in its own file guarded
// by a build tag (tandem_omit_groups, tandem_omit_share, tandem_omit_txn,
// tandem_omit_acl, tandem_omit_mirror), with a twin under the opposite tag
// that adds nothing.
package builtin

import "log/slog"

// Plugins returns the plugins compiled into this build, configured from
// the broker properties, for server.Config.Plugins, logging through log
// (not nil). An invalid property is an error naming it.
//
// This is the one place that names every plugin; plugin packages never
// register themselves into global state, so that a process may run many
// brokers.
func Plugins(props map[string]string, log *slog.Logger) ([]any, error) {
	var ps []any
	for _, with := range []func([]any, map[string]string, *slog.Logger) ([]any, error){
		withGroups, withShare, withTxn, withACL, withMirror,
	} {
		var err error
		if ps, err = with(ps, props, log); err != nil {
			return nil, err
		}
	}
	return ps, nil
}
