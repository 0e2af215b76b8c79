package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const aclsDoc = `Lists, creates and deletes ACLs with the words and flags of Apache Kafka's
kafka-acls.sh: principals (User:alice), hosts, operations (Read, Write,
Describe, ...), resources (--topic, --group, --cluster, --transactional-id,
--delegation-token) and resource pattern types (literal, prefixed; any and
match as filters).

Usage: tandem acls <command> [flags]
`

func acls(args []string, stdout, stderr io.Writer) int {
	return cli.RunVerbs("acls", aclsDoc, []cli.Verb{
		{Name: "list", Summary: "list ACLs (all, or of the resources and --principal named)", Run: aclsList},
		{Name: "create", Summary: "add ACLs: --allow-principal/--deny-principal x --operation x resource", Run: aclsCreate},
		{Name: "delete", Summary: "remove the ACLs that match the resources and principals named", Run: aclsDelete},
	}, args, stdout, stderr)
}

// aclFlags are kafka-acls.sh's flags.
type aclFlags struct {
	topics, groups, txnIDs, tokens   cli.MultiFlag
	cluster                          bool
	pattern                          string
	allow, deny, allowHost, denyHost cli.MultiFlag
	principals                       cli.MultiFlag // list's filter
	operations                       cli.MultiFlag
	producer, consumer               bool
}

func (f *aclFlags) register(fs *cli.Flags, verb string) {
	fs.Var(&f.topics, "topic", "topic `NAME` (repeatable; with --resource-pattern-type prefixed, a prefix; * is every topic)")
	fs.Var(&f.groups, "group", "group `NAME` (repeatable)")
	fs.BoolVar(&f.cluster, "cluster", false, "the cluster resource (kafka-cluster)")
	fs.Var(&f.txnIDs, "transactional-id", "transactional `ID` (repeatable)")
	fs.Var(&f.tokens, "delegation-token", "delegation token `ID` (repeatable)")
	fs.StringVar(&f.pattern, "resource-pattern-type", "", "`TYPE` of the resource names: literal (the default) or prefixed; as a filter also any or match (list's default with no resource: any)")
	if verb == "list" {
		fs.Var(&f.principals, "principal", "only ACLs of `PRINCIPAL` (User:alice; repeatable)")
		return
	}
	fs.Var(&f.allow, "allow-principal", "`PRINCIPAL` to allow, User:alice (repeatable)")
	fs.Var(&f.deny, "deny-principal", "`PRINCIPAL` to deny (repeatable)")
	fs.Var(&f.allowHost, "allow-host", "`HOST` the allowed principals connect from (repeatable; default *)")
	fs.Var(&f.denyHost, "deny-host", "`HOST` the denied principals connect from (repeatable; default *)")
	opHelp := "`OPERATION`: All, Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens (repeatable; default All)"
	if verb == "delete" {
		opHelp = "`OPERATION` to remove (repeatable; default: any)"
	}
	fs.Var(&f.operations, "operation", opHelp)
	if verb == "create" {
		fs.BoolVar(&f.producer, "producer", false, "the ACLs of a producer: Write, Describe and Create on --topic")
		fs.BoolVar(&f.consumer, "consumer", false, "the ACLs of a consumer: Read and Describe on --topic, Read on --group")
	}
}

// aclResource is one resource named by the flags.
type aclResource struct {
	typ  kmsg.ACLResourceType
	name string
}

func (f *aclFlags) resources() []aclResource {
	var out []aclResource
	add := func(typ kmsg.ACLResourceType, names []string) {
		for _, n := range names {
			out = append(out, aclResource{typ, n})
		}
	}
	add(kmsg.ACLResourceTypeTopic, f.topics)
	add(kmsg.ACLResourceTypeGroup, f.groups)
	if f.cluster {
		out = append(out, aclResource{kmsg.ACLResourceTypeCluster, "kafka-cluster"})
	}
	add(kmsg.ACLResourceTypeTransactionalId, f.txnIDs)
	add(kmsg.ACLResourceTypeDelegationToken, f.tokens)
	return out
}

// patternType is --resource-pattern-type; filter allows any and match.
func (f *aclFlags) patternType(filter bool, def kmsg.ACLResourcePatternType) (kmsg.ACLResourcePatternType, error) {
	if f.pattern == "" {
		return def, nil
	}
	p, err := kmsg.ParseACLResourcePatternType(f.pattern)
	switch {
	case err != nil:
	case p == kmsg.ACLResourcePatternTypeLiteral || p == kmsg.ACLResourcePatternTypePrefixed:
		return p, nil
	case filter:
		return p, nil
	}
	if filter {
		return 0, cli.UsageErrorf("--resource-pattern-type %q: want literal, prefixed, any or match", f.pattern)
	}
	return 0, cli.UsageErrorf("--resource-pattern-type %q: want literal or prefixed", f.pattern)
}

func (f *aclFlags) ops(def kmsg.ACLOperation) ([]kmsg.ACLOperation, error) {
	if len(f.operations) == 0 {
		return []kmsg.ACLOperation{def}, nil
	}
	var out []kmsg.ACLOperation
	for _, o := range f.operations {
		op, err := kmsg.ParseACLOperation(o)
		if err != nil || op == kmsg.ACLOperationAny || op == kmsg.ACLOperationUnknown {
			return nil, cli.UsageErrorf("--operation %q: want one of All, Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens", o)
		}
		if !slices.Contains(out, op) {
			out = append(out, op)
		}
	}
	return out, nil
}

// checkPrincipals refuses a principal that is not TYPE:NAME.
func checkPrincipals(flag string, ps []string) error {
	for _, p := range ps {
		if typ, name, ok := strings.Cut(p, ":"); !ok || typ == "" || name == "" {
			return cli.UsageErrorf("%s %q: a principal is TYPE:NAME, e.g. User:alice", flag, p)
		}
	}
	return nil
}

// listedACL is an ACL as `acls list --json` prints it, in Kafka's words.
type listedACL struct {
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
	ResourceType string `json:"resource_type"`
	ResourceName string `json:"resource_name"`
	PatternType  string `json:"pattern_type"`
}

func printACLs(w io.Writer, acls []listedACL) error {
	t := cli.NewTable(w, "PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "RESOURCE-NAME", "PATTERN-TYPE")
	for _, a := range acls {
		t.Row(a.Principal, a.Host, a.Operation, a.Permission, a.ResourceType, a.ResourceName, a.PatternType)
	}
	return t.Flush()
}

func sortACLs(acls []listedACL) []listedACL {
	slices.SortFunc(acls, func(a, b listedACL) int {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	})
	return slices.Compact(acls)
}

const aclsListDoc = `Lists ACLs: every ACL, or those on the resources named (literal names
unless --resource-pattern-type says otherwise) and of the --principal
named.

Usage: tandem acls list [--topic T ...] [--group G ...] [--cluster] [--transactional-id ID ...]
         [--resource-pattern-type literal|prefixed|any|match] [--principal User:NAME ...] [--json]
`

func aclsList(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("acls list", aclsListDoc, true)
	var f aclFlags
	f.register(c.Flags, "list")
	var reqs []*kmsg.DescribeACLsRequest
	check := func() error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		if err := checkPrincipals("--principal", f.principals); err != nil {
			return err
		}
		resources := f.resources()
		def := kmsg.ACLResourcePatternTypeLiteral
		if len(resources) == 0 {
			resources, def = []aclResource{{typ: kmsg.ACLResourceTypeAny}}, kmsg.ACLResourcePatternTypeAny
		}
		pattern, err := f.patternType(true, def)
		if err != nil {
			return err
		}
		principals := []*string{nil}
		if len(f.principals) > 0 {
			principals = nil
			for _, p := range f.principals {
				principals = append(principals, kmsg.StringPtr(p))
			}
		}
		for _, r := range resources {
			for _, p := range principals {
				req := kmsg.NewPtrDescribeACLsRequest()
				req.ResourceType, req.ResourcePatternType, req.Principal = r.typ, pattern, p
				if r.typ != kmsg.ACLResourceTypeAny {
					req.ResourceName = kmsg.StringPtr(r.name)
				}
				req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
				reqs = append(reqs, req)
			}
		}
		return nil
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, cl *kgo.Client, _ *kadm.Client) error {
		out := []listedACL{}
		for _, req := range reqs {
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return fmt.Errorf("describing ACLs: %w", err)
			}
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return fmt.Errorf("describing ACLs: %w", cli.KafkaError(err, deref(resp.ErrorMessage)))
			}
			for _, r := range resp.Resources {
				for _, a := range r.ACLs {
					out = append(out, listedACL{Principal: a.Principal, Host: a.Host, Operation: a.Operation.String(), Permission: a.PermissionType.String(),
						ResourceType: r.ResourceType.String(), ResourceName: r.ResourceName, PatternType: r.ResourcePatternType.String()})
				}
			}
		}
		out = sortACLs(out)
		if c.AsJSON {
			return cli.PrintJSON(stdout, out)
		}
		return printACLs(stdout, out)
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

const aclsCreateDoc = `Adds ACLs: every --allow-principal (and --deny-principal) from each of
its hosts, for each --operation (default All, as kafka-acls.sh), on every
resource named. --producer and --consumer add what a producer or a
consumer needs.

Usage: tandem acls create (--allow-principal P ... | --deny-principal P ...) [--operation OP ...]
         (--topic T ... | --group G ... | --cluster | --transactional-id ID ...) [--resource-pattern-type literal|prefixed]

The broker must run with an authorizer (authorizer.class.name).
`

func aclsCreate(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("acls create", aclsCreateDoc, false)
	var f aclFlags
	f.register(c.Flags, "create")
	var creations []kmsg.CreateACLsRequestCreation
	check := func() error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		if err := errors.Join(checkPrincipals("--allow-principal", f.allow), checkPrincipals("--deny-principal", f.deny)); err != nil {
			return cli.Usage(err)
		}
		if len(f.allow)+len(f.deny) == 0 {
			return cli.UsageErrorf("name who: --allow-principal User:NAME or --deny-principal User:NAME")
		}
		if len(f.allowHost) > 0 && len(f.allow) == 0 || len(f.denyHost) > 0 && len(f.deny) == 0 {
			return cli.UsageErrorf("--allow-host goes with --allow-principal, --deny-host with --deny-principal")
		}
		pattern, err := f.patternType(false, kmsg.ACLResourcePatternTypeLiteral)
		if err != nil {
			return err
		}
		grants, err := f.grants()
		if err != nil {
			return err
		}
		creations = f.creations(grants, pattern)
		return nil
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, cl *kgo.Client, _ *kadm.Client) error {
		req := kmsg.NewPtrCreateACLsRequest()
		req.Creations = creations
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("creating ACLs: %w", err)
		}
		if len(resp.Results) != len(creations) {
			return fmt.Errorf("creating ACLs: %d answers to %d ACLs", len(resp.Results), len(creations))
		}
		var created []listedACL
		var errs []string
		for i, r := range resp.Results {
			cr := creations[i]
			a := listedACL{Principal: cr.Principal, Host: cr.Host, Operation: cr.Operation.String(), Permission: cr.PermissionType.String(),
				ResourceType: cr.ResourceType.String(), ResourceName: cr.ResourceName, PatternType: cr.ResourcePatternType.String()}
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				errs = append(errs, fmt.Sprintf("%s %s %s on %s %s: %v", a.Permission, a.Principal, a.Operation, a.ResourceType, a.ResourceName, cli.KafkaError(err, deref(r.ErrorMessage))))
				continue
			}
			created = append(created, a)
		}
		if len(created) > 0 {
			fmt.Fprintf(stdout, "Created %d ACL(s):\n", len(created))
			printACLs(stdout, created)
		}
		if len(errs) > 0 {
			return errors.New(dedupeJoin(errs))
		}
		return nil
	})
}

// aclGrant is an operation on a resource that acls create grants or
// denies.
type aclGrant struct {
	res aclResource
	op  kmsg.ACLOperation
}

// grants is what acls create's flags grant (or deny): --producer's and
// --consumer's operations on their topics and groups, or the operations
// named on the resources named.
func (f *aclFlags) grants() ([]aclGrant, error) {
	var grants []aclGrant
	if f.producer || f.consumer {
		if len(f.topics) == 0 || f.consumer && len(f.groups) == 0 {
			return nil, cli.UsageErrorf("--producer needs --topic; --consumer needs --topic and --group")
		}
		for _, t := range f.topics {
			if f.producer {
				for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationCreate} {
					grants = append(grants, aclGrant{aclResource{kmsg.ACLResourceTypeTopic, t}, op})
				}
			}
			if f.consumer {
				for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe} {
					grants = append(grants, aclGrant{aclResource{kmsg.ACLResourceTypeTopic, t}, op})
				}
			}
		}
		if f.consumer {
			for _, g := range f.groups {
				grants = append(grants, aclGrant{aclResource{kmsg.ACLResourceTypeGroup, g}, kmsg.ACLOperationRead})
			}
		}
		return grants, nil
	}
	resources := f.resources()
	if len(resources) == 0 {
		return nil, cli.UsageErrorf("name a resource: --topic, --group, --cluster, --transactional-id or --delegation-token")
	}
	ops, err := f.ops(kmsg.ACLOperationAll)
	if err != nil {
		return nil, err
	}
	for _, r := range resources {
		for _, op := range ops {
			grants = append(grants, aclGrant{r, op})
		}
	}
	return grants, nil
}

// creations is the ACLs acls create asks for: each grant for each
// allowed principal and host, then for each denied one (any host when
// none is named), with resource pattern type pattern.
func (f *aclFlags) creations(grants []aclGrant, pattern kmsg.ACLResourcePatternType) []kmsg.CreateACLsRequestCreation {
	var creations []kmsg.CreateACLsRequestCreation
	for _, side := range []struct {
		principals, hosts cli.MultiFlag
		perm              kmsg.ACLPermissionType
	}{{f.allow, f.allowHost, kmsg.ACLPermissionTypeAllow}, {f.deny, f.denyHost, kmsg.ACLPermissionTypeDeny}} {
		hosts := side.hosts
		if len(hosts) == 0 {
			hosts = cli.MultiFlag{"*"}
		}
		for _, p := range side.principals {
			for _, h := range hosts {
				for _, g := range grants {
					cr := kmsg.NewCreateACLsRequestCreation()
					cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = g.res.typ, g.res.name, pattern
					cr.Principal, cr.Host, cr.Operation, cr.PermissionType = p, h, g.op, side.perm
					creations = append(creations, cr)
				}
			}
		}
	}
	return creations
}

// dedupeJoin joins messages with "; ", the same reason once: "ALLOW
// User:a READ on TOPIC t: SECURITY_DISABLED: ...; ALLOW User:a WRITE on
// TOPIC t: SECURITY_DISABLED: ..." becomes one reason naming both.
func dedupeJoin(msgs []string) string {
	reasons := map[string][]string{}
	var order []string
	for _, m := range msgs {
		what, why, _ := strings.Cut(m, ": ")
		if _, ok := reasons[why]; !ok {
			order = append(order, why)
		}
		reasons[why] = append(reasons[why], what)
	}
	var parts []string
	for _, why := range order {
		parts = append(parts, strings.Join(reasons[why], ", ")+": "+why)
	}
	return strings.Join(parts, "; ")
}

const aclsDeleteDoc = `Removes the ACLs that match: on the resources named (literal names
unless --resource-pattern-type says otherwise; any or match widen the
filter), of the principals and hosts named (default: any), for the
operations named (default: any). It prints what it removed.

Usage: tandem acls delete (--topic T ... | --group G ... | --cluster | --transactional-id ID ...)
         [--allow-principal P ...] [--deny-principal P ...] [--operation OP ...] [--resource-pattern-type TYPE]
`

func aclsDelete(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("acls delete", aclsDeleteDoc, false)
	var f aclFlags
	f.register(c.Flags, "delete")
	var filters []kmsg.DeleteACLsRequestFilter
	check := func() error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		if err := errors.Join(checkPrincipals("--allow-principal", f.allow), checkPrincipals("--deny-principal", f.deny)); err != nil {
			return cli.Usage(err)
		}
		resources := f.resources()
		if len(resources) == 0 {
			return cli.UsageErrorf("name the resource(s) whose ACLs go: --topic, --group, --cluster, --transactional-id or --delegation-token")
		}
		pattern, err := f.patternType(true, kmsg.ACLResourcePatternTypeLiteral)
		if err != nil {
			return err
		}
		ops, err := f.ops(kmsg.ACLOperationAny)
		if err != nil {
			return err
		}
		type who struct {
			principal, host *string
			perm            kmsg.ACLPermissionType
		}
		var whos []who
		for _, side := range []struct {
			principals, hosts cli.MultiFlag
			perm              kmsg.ACLPermissionType
		}{{f.allow, f.allowHost, kmsg.ACLPermissionTypeAllow}, {f.deny, f.denyHost, kmsg.ACLPermissionTypeDeny}} {
			for _, p := range side.principals {
				if len(side.hosts) == 0 {
					whos = append(whos, who{kmsg.StringPtr(p), nil, side.perm})
				}
				for _, h := range side.hosts {
					whos = append(whos, who{kmsg.StringPtr(p), kmsg.StringPtr(h), side.perm})
				}
			}
		}
		if len(whos) == 0 {
			whos = []who{{nil, nil, kmsg.ACLPermissionTypeAny}}
		}
		for _, r := range resources {
			for _, w := range whos {
				for _, op := range ops {
					fl := kmsg.NewDeleteACLsRequestFilter()
					fl.ResourceType, fl.ResourceName, fl.ResourcePatternType = r.typ, kmsg.StringPtr(r.name), pattern
					fl.Principal, fl.Host, fl.Operation, fl.PermissionType = w.principal, w.host, op, w.perm
					filters = append(filters, fl)
				}
			}
		}
		return nil
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, cl *kgo.Client, _ *kadm.Client) error {
		req := kmsg.NewPtrDeleteACLsRequest()
		req.Filters = filters
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("deleting ACLs: %w", err)
		}
		var deleted []listedACL
		var errs []string
		for _, r := range resp.Results {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				errs = append(errs, "deleting ACLs: "+cli.KafkaError(err, deref(r.ErrorMessage)).Error())
				continue
			}
			for _, m := range r.MatchingACLs {
				if err := kerr.ErrorForCode(m.ErrorCode); err != nil {
					errs = append(errs, fmt.Sprintf("%s %s on %s %s: %v", m.Principal, m.Operation, m.ResourceType, m.ResourceName, cli.KafkaError(err, deref(m.ErrorMessage))))
					continue
				}
				deleted = append(deleted, listedACL{Principal: m.Principal, Host: m.Host, Operation: m.Operation.String(), Permission: m.PermissionType.String(),
					ResourceType: m.ResourceType.String(), ResourceName: m.ResourceName, PatternType: m.ResourcePatternType.String()})
			}
		}
		deleted = sortACLs(deleted)
		fmt.Fprintf(stdout, "Deleted %d ACL(s).\n", len(deleted))
		if len(deleted) > 0 {
			printACLs(stdout, deleted)
		}
		if len(errs) > 0 {
			return errors.New(dedupeJoin(errs))
		}
		return nil
	})
}
