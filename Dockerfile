# ayatori-manager and ayatori-journal: a static build on a non-root runtime
# base. The base images are build arguments: the defaults are the upstream
# images (a registry is needed); `make images` builds without one, from
# images it makes itself (integration/images/build.sh "manager"):
#
#   docker build --network host \
#     --build-arg BUILD_IMAGE=ayatori-test/golang:<go version> \
#     --build-arg RUNTIME_IMAGE=ayatori-test/debian:bookworm \
#     -t ayatori-manager:latest .
#
# The runtime stage runs as 65532:65532 and writes nothing to its root
# filesystem, so it runs under readOnlyRootFilesystem (deploy/manager).
ARG BUILD_IMAGE=golang:1.26
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
ARG GOPROXY=https://proxy.golang.org,direct
ENV GOPROXY=${GOPROXY} GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOTOOLCHAIN=local
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# Optional: the binaries' dependency packages (import paths, space
# separated), compiled in a layer of their own, so their build cache is
# reused while go.mod and go.sum stay the same (make images passes them).
ARG PRECOMPILE=""
RUN if [ -n "$PRECOMPILE" ]; then go build -trimpath $PRECOMPILE; fi
COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/ayatori-manager ./cmd/ayatori-journal

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/ayatori-manager /out/ayatori-journal /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ayatori-manager"]
