package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/azureipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/watchcache"
)

// AzureNNCConfig is where the node's NodeNetworkConfig is.
type AzureNNCConfig struct {
	// Namespace of the NodeNetworkConfigs (kube-system, where CNS's
	// controller writes them).
	Namespace string
}

// DefaultAzureNNCConfig is Azure CNS's.
func DefaultAzureNNCConfig() AzureNNCConfig { return AzureNNCConfig{Namespace: azureipam.Namespace} }

// newAzureNNCWatch watches the NodeNetworkConfig named as the node; nothing
// is requested before the first Get.
func newAzureNNCWatch(client dynamic.Interface, cfg AzureNNCConfig, nodeName string) *watchcache.Object {
	return watchcache.NewObject(client, azureipam.NodeNetworkConfigs, cfg.Namespace, nodeName)
}

// sampleAzure reads the figures of the node's NodeNetworkConfig: capacity
// from it, use from the node's pods whose address lies in its allocation
// (CNS's assignments are not in it; see pkg/azureipam).
func (p *IPProbe) sampleAzure(ctx context.Context, now time.Time) (Sample, error) {
	logger := klog.FromContext(ctx)
	obj, err := p.AzureNNC.Get(ctx)
	if errors.Is(err, watchcache.ErrNotSynced) {
		logger.V(2).Info("Pod-IP figures not known yet", "reason", err)
		return nil, nil
	}
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		p.unknown(ctx, fmt.Sprintf("the network's plugin is %s with %s IPAM but the node has no NodeNetworkConfig: %v", azureipam.CNIType, azureipam.CNSIPAMType, err))
		return nil, nil
	}
	if apierrors.IsForbidden(err) {
		p.unknown(ctx, fmt.Sprintf("the network's plugin is %s with %s IPAM but the agent may not read NodeNetworkConfigs (the component manifests/node-agent/azure-cni, chart value nodeAgent.azureCNI.enabled, grants it): %v", azureipam.CNIType, azureipam.CNSIPAMType, err))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the node's NodeNetworkConfig: %w", err)
	}
	a, err := azureipam.FromObject(obj)
	if errors.Is(err, azureipam.ErrUnsupported) {
		p.unknown(ctx, err.Error())
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pods, err := p.NodePods.List(ctx)
	if apierrors.IsForbidden(err) {
		p.unknown(ctx, fmt.Sprintf("Azure CNI's use is counted from the node's pods, which the agent may not list: %v", err))
		return nil, nil
	}
	if errors.Is(err, ErrPodsNotSynced) {
		logger.V(2).Info("Pod-IP figures not known yet", "reason", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the node's pods: %w", err)
	}
	var used int64
	for _, pod := range pods {
		if !HoldsPodIP(pod) {
			continue
		}
		ips := make([]string, len(pod.Status.PodIPs))
		for i, ip := range pod.Status.PodIPs {
			ips[i] = ip.IP
		}
		used += min(a.Used(ips), 1)
	}
	p.known(ctx, "ipam", "azure-cns")
	p.leakUnknown(ctx, errors.New("Azure CNI's IPAM: leaked addresses are not told"))
	s := p.crossCheck(ctx, "azure-cns", ipstats.NewNodeStats(a.Capacity(), used, now), used, nil)
	logger.V(5).Info("Read the NodeNetworkConfig", "capacity", s.Capacity, "used", s.Used, "allocated", len(a.Addresses),
		"releasing", a.Releasing, "requested", a.Requested, "maxIPCount", a.MaxIPCount, "batchSize", a.BatchSize, "subnetFull", a.SubnetFull)
	return p.sample(s), nil
}
