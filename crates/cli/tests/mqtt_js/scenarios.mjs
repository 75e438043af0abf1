// MQTT.js (npm `mqtt`, pinned in package.json) against a tidings broker, one step per run,
// driven by crates/cli/tests/mqtt_js.rs, which starts the broker and the native `tidings`
// commands on the other side and checks what these steps print.
//
//   node scenarios.mjs subscribe URL VERSION FILTER QOS COUNT [CLIENT_ID]
//       Subscribes, prints `subscribed`, then one line per message (see `line`) until COUNT.
//       With CLIENT_ID: a persistent session (clean false; 5.0: session expiry 300 s), and
//       `session_present=BOOL` is printed first.
//   node scenarios.mjs publish URL VERSION TOPIC PAYLOAD QOS [retain] [KEY=VALUE...]
//       Publishes once (KEY=VALUE: 5.0 user properties), waits for PUBACK at QoS 1, prints
//       `published`.
//   node scenarios.mjs resume URL VERSION CLIENT_ID COUNT
//       Reconnects a persistent session without subscribing: prints `session_present=BOOL`,
//       then what the session kept, one line per message, until COUNT.
//
// URL is mqtt://HOST:PORT or ws://HOST:PORT/mqtt; VERSION is 4 (3.1.1) or 5. Every step gives
// up after 20 s, saying where it was, and exits non-zero on any error.

import mqtt from "mqtt";

const [scenario, url, versionText, ...rest] = process.argv.slice(2);
const version = Number(versionText);
let stage = "connecting";

setTimeout(() => fail(`timed out while ${stage}`), 20_000).unref();

function fail(why) {
  process.stderr.write(`${scenario} ${url} v${version}: ${why}\n`);
  process.exit(1);
}

// One message as a line: `TOPIC PAYLOAD qos=N retain=BOOL`, then, if it has user properties,
// ` |` and ` KEY=VALUE` for each.
function line(topic, payload, packet) {
  const out = `${topic} ${payload.toString()} qos=${packet.qos} retain=${packet.retain}`;
  const user = Object.entries(packet.properties?.userProperties ?? {});
  return user.length === 0 ? out : `${out} |${user.map(([key, value]) => ` ${key}=${value}`).join("")}`;
}

// Connects with `options` and resolves with the client, messages already going to `onMessage`
// (a persistent session's messages follow CONNACK at once). With a persistent session's
// `clientId`, prints `session_present=BOOL` as CONNACK is read, so before any of them: MQTT.js
// may emit `connect` only after the first messages, so `packetreceive` is watched instead.
function connect(options, onMessage) {
  const client = mqtt.connect(url, {
    protocolVersion: version,
    reconnectPeriod: 0,
    connectTimeout: 10_000,
    ...options,
  });
  if (options.clientId) {
    client.on("packetreceive", (packet) => {
      if (packet.cmd === "connack") {
        console.log(`session_present=${packet.sessionPresent}`);
      }
    });
  }
  if (onMessage) {
    client.on("message", onMessage);
  }
  return new Promise((resolve, reject) => {
    client.once("connect", () => resolve(client));
    client.once("error", reject);
    client.once("close", () => reject(new Error(`closed while ${stage}`)));
  });
}

function persistent(clientId) {
  const options = { clientId, clean: false };
  if (version === 5) {
    options.properties = { sessionExpiryInterval: 300 };
  }
  return options;
}

// Prints each message as it comes; resolves after `count`.
function counter(count) {
  let seen = 0;
  let done;
  const finished = new Promise((resolve) => {
    done = resolve;
  });
  const onMessage = (topic, payload, packet) => {
    console.log(line(topic, payload, packet));
    seen += 1;
    if (seen === count) {
      done();
    }
  };
  return { onMessage, finished: count === 0 ? Promise.resolve() : finished };
}

async function subscribe([filter, qos, count, clientId]) {
  const { onMessage, finished } = counter(Number(count));
  const client = await connect(clientId ? persistent(clientId) : {}, onMessage);
  stage = "subscribing";
  const granted = await client.subscribeAsync(filter, { qos: Number(qos) });
  if (granted.some((grant) => grant.qos > 2)) {
    fail(`SUBSCRIBE refused: ${JSON.stringify(granted)}`);
  }
  console.log("subscribed");
  stage = `waiting for ${count} messages`;
  await finished;
  await client.endAsync();
}

async function publish([topic, payload, qos, ...more]) {
  const retain = more[0] === "retain";
  const userProperties = Object.fromEntries(
    more.slice(retain ? 1 : 0).map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]),
  );
  const client = await connect({});
  stage = "publishing";
  const options = { qos: Number(qos), retain };
  if (Object.keys(userProperties).length > 0) {
    options.properties = { userProperties };
  }
  await client.publishAsync(topic, payload, options);
  console.log("published");
  await client.endAsync();
}

async function resume([clientId, count]) {
  const { onMessage, finished } = counter(Number(count));
  const client = await connect(persistent(clientId), onMessage);
  stage = `waiting for ${count} kept messages`;
  await finished;
  await client.endAsync();
}

const scenarios = { subscribe, publish, resume };
if (!scenarios[scenario] || !url || ![4, 5].includes(version)) {
  fail("usage: node scenarios.mjs subscribe|publish|resume URL 4|5 ARGS... (see the file's head)");
}
scenarios[scenario](rest).then(
  () => process.exit(0),
  (error) => fail(`${stage}: ${error?.message ?? error}`),
);
