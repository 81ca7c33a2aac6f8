# Images of Headroom's three binaries, one target each:
#   docker build --target headroom-scheduler -t <registry>/headroom-scheduler:<tag> .
# (likewise headroom-descheduler, headroom-pid-reporter), then point the
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

FROM gcr.io/distroless/static-debian12:nonroot AS headroom-pid-reporter
COPY --from=build /src/bin/headroom-pid-reporter /headroom-pid-reporter
ENTRYPOINT ["/headroom-pid-reporter"]
