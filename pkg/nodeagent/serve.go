package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	apiserveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// ServingOptions are the settings of the agent's /metrics and /healthz
// endpoint: HTTPS with the delegated authentication and authorization of
// kube-scheduler's secure port (k8s.io/apiserver), so that /metrics answers
// only an identity the API server authorizes for GET /metrics (a
// nonResourceURLs rule), while /healthz stays open to the kubelet's probe.
// The agent runs on the host's network, so its port is on every interface
// of the node: without authorization, anyone who reaches the node would
// read it. See cmd/node-agent/README.md.
type ServingOptions struct {
	SecureServing  *apiserveroptions.SecureServingOptions
	Authentication *apiserveroptions.DelegatingAuthenticationOptions
	Authorization  *apiserveroptions.DelegatingAuthorizationOptions
}

// NewServingOptions returns kube-scheduler's defaults but one: the
// in-cluster lookup of kube-system's extension-apiserver-authentication
// ConfigMap is skipped, so that the agent needs no right in kube-system.
// Scrapers present bearer tokens (TokenReview); client certificates work
// with --client-ca-file.
func NewServingOptions() *ServingOptions {
	o := &ServingOptions{
		SecureServing:  apiserveroptions.NewSecureServingOptions(),
		Authentication: apiserveroptions.NewDelegatingAuthenticationOptions(),
		Authorization:  apiserveroptions.NewDelegatingAuthorizationOptions(),
	}
	// A self-signed certificate made in memory at start, as kube-scheduler's
	// (the agent's root filesystem is read-only).
	o.SecureServing.ServerCert.CertDirectory = ""
	o.SecureServing.ServerCert.PairName = "headroom-node-agent"
	o.Authentication.SkipInClusterLookup = true
	o.Authentication.RemoteKubeConfigFileOptional = true
	o.Authorization.RemoteKubeConfigFileOptional = true
	o.Authorization.AlwaysAllowPaths = []string{"/healthz"}
	return o
}

// servingFlags are the flags of SecureServingOptions the agent takes: the
// address is --metrics-bind-address, kept from headroom-pid-reporter.
var servingFlags = []string{"tls-cert-file", "tls-private-key-file", "tls-min-version", "tls-cipher-suites"}

// AddFlags registers the certificate flags and every delegated
// authentication and authorization flag on fs.
func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	all := pflag.NewFlagSet("secure serving", pflag.ContinueOnError)
	o.SecureServing.AddFlags(all)
	for _, name := range servingFlags {
		fs.AddFlag(all.Lookup(name))
	}
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
}

// Serve starts the HTTPS endpoint on addr (host:port; an empty host is
// every address) with /metrics and /healthz behind the delegated
// authentication and authorization, which ask the API server through
// kubeconfig where --authentication-kubeconfig and
// --authorization-kubeconfig are not given (the in-cluster configuration
// when that is empty too). It stops with ctx.
func (o *ServingOptions) Serve(ctx context.Context, addr, kubeconfig string, metrics, healthz http.Handler) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address %q: %w", addr, err)
	}
	if o.SecureServing.BindPort, err = strconv.Atoi(port); err != nil {
		return fmt.Errorf("--metrics-bind-address %q: %w", addr, err)
	}
	if host == "" {
		// Every address, as Go listens on ":port": IPv4 and IPv6 where the
		// host has both, IPv4 alone where IPv6 is off ("[::]" would fail).
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("--metrics-bind-address: %w", err)
		}
		o.SecureServing.Listener = ln
		o.SecureServing.BindAddress = net.IPv4zero
	} else if o.SecureServing.BindAddress = net.ParseIP(host); o.SecureServing.BindAddress == nil {
		return fmt.Errorf("--metrics-bind-address %q: %q is not an IP address", addr, host)
	}
	if o.Authentication.RemoteKubeConfigFile == "" {
		o.Authentication.RemoteKubeConfigFile = kubeconfig
	}
	if o.Authorization.RemoteKubeConfigFile == "" {
		o.Authorization.RemoteKubeConfigFile = kubeconfig
	}
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	if len(errs) > 0 {
		return fmt.Errorf("serving options: %v", errs)
	}
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return err
	}
	var serving *server.SecureServingInfo
	if err := o.SecureServing.ApplyTo(&serving); err != nil {
		return err
	}
	var authn server.AuthenticationInfo
	if err := o.Authentication.ApplyTo(&authn, serving, nil); err != nil {
		return err
	}
	var authz server.AuthorizationInfo
	if err := o.Authorization.ApplyTo(&authz); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.Handle("/healthz", healthz)
	// kube-scheduler's chain (cmd/kube-scheduler/app/server.go buildHandlerChain).
	requestInfo := &apirequest.RequestInfoFactory{}
	var handler http.Handler = mux
	handler = genericapifilters.WithAuthorization(handler, authz.Authorizer, scheme.Codecs)
	handler = genericapifilters.WithAuthentication(handler, authn.Authenticator, genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	handler = genericapifilters.WithRequestInfo(handler, requestInfo)
	handler = genericapifilters.WithCacheControl(handler)
	handler = genericfilters.WithHTTPLogging(handler)
	handler = genericfilters.WithPanicRecovery(handler, requestInfo)

	if _, _, err := serving.Serve(handler, 5*time.Second, ctx.Done()); err != nil {
		return fmt.Errorf("--metrics-bind-address: %w", err)
	}
	klog.InfoS("Serving /metrics and /healthz over HTTPS", "address", serving.Listener.Addr().String())
	return nil
}
