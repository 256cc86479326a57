<?xml version="1.0"?>
<!-- HTML output method: void elements, no XML declaration, meta charset. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="html" encoding="UTF-8"/>
  <xsl:template match="/">
    <html>
      <head><title>Orders &amp; more</title></head>
      <body>
        <table>
          <xsl:for-each select="//order">
            <tr><td><xsl:value-of select="symbol"/></td><td><xsl:value-of select="price"/></td></tr>
          </xsl:for-each>
        </table>
        <br/><input type="checkbox" checked="checked"/>
        <script>if (1 &lt; 2) { x = "&amp;"; }</script>
      </body>
    </html>
  </xsl:template>
</xsl:stylesheet>
