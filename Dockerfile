# Multi-stage build of ayatori-manager and ayatori-journal; distroless, non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/ayatori-manager ./cmd/ayatori-journal

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ayatori-manager /out/ayatori-journal /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ayatori-manager"]
