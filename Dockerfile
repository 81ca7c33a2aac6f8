# Images of Headroom's three binaries, one target each:
#   docker build --target headroom-scheduler -t <registry>/headroom-scheduler:<tag> .
# (likewise headroom-descheduler, headroom-node-agent), then point the
# manifests at them, e.g. with `kustomize edit set image`.
FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN hack/build.sh

FROM gcr.io/distroless/static-debian12:nonroot AS headroom-scheduler
COPY --from=build /src/bin/headroom-scheduler /headroom-scheduler
ENTRYPOINT ["/headroom-scheduler"]

FROM gcr.io/distroless/static-debian12:nonroot AS headroom-descheduler
COPY --from=build /src/bin/headroom-descheduler /headroom-descheduler
ENTRYPOINT ["/headroom-descheduler"]

FROM gcr.io/distroless/static-debian12:nonroot AS headroom-node-agent
COPY --from=build /src/bin/headroom-node-agent /headroom-node-agent
ENTRYPOINT ["/headroom-node-agent"]
