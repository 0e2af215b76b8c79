// Package plugin is the seam between Tandem's broker (package server) and
// its plugins: every hook the broker calls, the Host a plugin is given,
// the request context and error codes of request handlers, the contracts
// plugins offer each other, and the wiring that coordinator plugins
// share (Coordinator).
//
// A plugin is any value in server.Config.Plugins. It implements only the
// hooks it needs, and the broker finds them by type assertion, the way
// franz-go's client finds its hooks. Plugins find each other's
// capabilities the same way, among Host.Plugins (Find, All), so that a
// plugin imports this package, engine, engine/coord, raftmeta/metadata
// and small helpers (prom, internal packages), and never server nor
// another plugin. Neither this package nor any plugin imports raft
// (neither raftmeta nor hashicorp/raft): the controller's decisions take
// raftmeta/metadata's types, and a plugin reaches the metadata quorum
// through Host.Metadata.
//
// # Order
//
// What a plugin can rely on, from server.Broker.Start to Close:
//
//  1. The data dir is locked, the listeners are bound (not accepting), the
//     engine and the metadata quorum are open, and the broker is
//     registered. Nothing has called a plugin yet, except PropsOwner and
//     the APIHandler and CoordinatorLocator lists read by server.New.
//  2. Lifecycle.Start, plugin by plugin in Config.Plugins order. A plugin
//     holds on to its Host here.
//  3. Leadership is reconciled: LeaderObserver.OnLeaderChange for every
//     partition this broker leads, then each MetadataObserver gets the
//     delta from the empty image to the current one.
//  4. The listeners accept: APIHandler, CoordinatorLocator,
//     ConfigResourceHandler, TxnCoordinator, TxnPartitionAdder and
//     Authorizer serve requests; observers hear of every metadata change.
//  5. Close: the listeners and connections close, in-flight requests and
//     observer calls return, then Lifecycle.Stop runs in the reverse
//     order of Start. The engine and the quorum close after the last Stop.
//
// The engine's hooks, AppendValidator and AppendObserver, are called by
// whatever appends: they may run before the plugin's own Start returned
// (another plugin appends while plugins start) and while plugins stop.
package plugin
