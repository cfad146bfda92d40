/** An artifact as the agent lists it. */
export interface ArtifactInfo {
    name: string;
    sha256: string;
    size: number;
    [field: string]: unknown;
}
export interface ArtifactPutOptions {
    /** Put the project's cached artifact under this key instead of the run's own. */
    key?: string;
    /** A trusted run's artifact untrusted runs may read (docs/security/trust.md). */
    public?: boolean;
}
export interface ArtifactGetOptions {
    key?: string;
    /** Another run's artifact. */
    run?: string;
    /** A trusted run gets the artifact untrusted runs put (or an untrusted run's own). */
    tainted?: boolean;
}
export interface ArtifactListOptions {
    run?: string;
    /** The project's cached artifacts instead of a run's. */
    cached?: boolean;
    /** A trusted run lists what untrusted runs put. */
    tainted?: boolean;
}
/** Store the file at `path` as artifact `name` of this run (or the project's cached
 * artifact with `key`); returns its name, sha256 and size. Not journaled: a replay puts
 * the same bytes again, which the store keeps once. */
export declare function artifactPut(name: string, path: string, options?: ArtifactPutOptions): Promise<ArtifactInfo>;
/** Fetch artifact `name` (this run's, the cached one with `key`, or run `run`'s) into
 * `path` (default: the name's last part); returns the path written. */
export declare function artifactGet(name: string, path?: string, options?: ArtifactGetOptions): Promise<string>;
/** This run's artifacts (or run `run`'s, or with `cached` the project's cached ones). */
export declare function artifactList(options?: ArtifactListOptions): Promise<ArtifactInfo[]>;
