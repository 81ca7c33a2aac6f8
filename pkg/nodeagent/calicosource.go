package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/calicoipam"
	"github.com/headroom-k8s/headroom/pkg/cniipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// CalicoSource counts the node's Calico IPAM figures (calicoipam.Watch).
type CalicoSource interface {
	// Usage counts them from the watches' caches, starting the watches if
	// they are not running: calicoipam.ErrNotSynced until they have
	// listed every resource.
	Usage(ctx context.Context, fams calicoipam.Families) (calicoipam.Usage, error)
	// Stop ends the watches: the network is not Calico's.
	Stop()
}

// nodeCalico is the node's CalicoSource: the cluster's figures, the node's
// part.
type nodeCalico struct {
	*calicoipam.Watch
	node string
}

func (c nodeCalico) Usage(ctx context.Context, fams calicoipam.Families) (calicoipam.Usage, error) {
	return c.Watch.Usage(ctx, c.node, fams)
}

// sampleCalico reads the figures of a network whose IPAM is calico-ipam
// from Calico's objects in the API server. Without the rights to read them
// (manifests/node-agent/calico-ipam not applied), or without Calico's CRDs,
// the figures are unknown, logged once.
func (p *IPProbe) sampleCalico(ctx context.Context, now time.Time, network *cniipam.UnsupportedError) (Sample, error) {
	fams, err := calicoFamilies(network.File)
	if err != nil {
		return nil, err
	}
	u, err := p.Calico.Usage(ctx, fams)
	switch {
	case errors.Is(err, calicoipam.ErrNotSynced):
		klog.FromContext(ctx).V(2).Info("Pod-IP figures not known yet", "reason", err)
		p.setLeakedMetric(math.NaN())
		return nil, nil
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		p.unknown(ctx, fmt.Sprintf("the network's IPAM is %s but Calico's IPAM objects cannot be read "+
			"(the agent needs manifests/node-agent/calico-ipam, and Calico's Kubernetes datastore): %v", calicoipam.IPAMType, err))
		return nil, nil
	case errors.Is(err, calicoipam.ErrUnsupported):
		p.unknown(ctx, err.Error())
		return nil, nil
	case err != nil:
		return nil, err
	}
	p.known(ctx, "ipam", calicoipam.IPAMType, "network", network.Network)
	p.leakUnknown(ctx, errors.New("Calico's IPAM: leaked addresses are not told"))
	// Calico's attributes name each address's pod: the node's tunnel
	// address is not one.
	s := p.crossCheck(ctx, "calico", ipstats.NewNodeStats(u.Capacity, u.Used, now), u.Pods, nil)
	klog.FromContext(ctx).V(5).Info("Read Calico's IPAM", "capacity", s.Capacity, "used", s.Used, "pods", u.Pods, "families", u.Families)
	return p.sample(s), nil
}

// calicoFamilies reads the address families the network's calico-ipam
// section assigns.
func calicoFamilies(file string) (calicoipam.Families, error) {
	list, err := cniipam.ReadConfList(file)
	if err != nil {
		return calicoipam.Families{}, err
	}
	for _, pl := range list.Plugins {
		if pl.Network.IPAM.Type != calicoipam.IPAMType {
			continue
		}
		var raw struct {
			IPAM json.RawMessage `json:"ipam"`
		}
		if err := json.Unmarshal(pl.Bytes, &raw); err != nil {
			return calicoipam.Families{}, fmt.Errorf("CNI network configuration %s: %w", file, err)
		}
		f, err := calicoipam.ParseFamilies(raw.IPAM)
		if err != nil {
			return calicoipam.Families{}, fmt.Errorf("CNI network configuration %s: %w", file, err)
		}
		return f, nil
	}
	return calicoipam.Families{}, fmt.Errorf("CNI network configuration %s: no plugin with IPAM %s", file, calicoipam.IPAMType)
}
